import torch
from torchao.quantization import Float8WeightOnlyConfig
from transformers import AutoModelForCausalLM, TorchAoConfig

quantization_config = TorchAoConfig(Float8WeightOnlyConfig())
model = AutoModelForCausalLM.from_pretrained(
    "meta-llama/Llama-3.1-8B-Instruct",
    torch_dtype=torch.bfloat16,
    quantization_config=quantization_config,
)
model = torch.compile(model, mode="max-autotune")
