import torch
from torchao.quantization import FqnToConfig, Int8WeightOnlyConfig
from transformers import AutoModelForCausalLM, TorchAoConfig

per_module = FqnToConfig({"_default": Int8WeightOnlyConfig(), "lm_head": None})
model = AutoModelForCausalLM.from_pretrained(
    "meta-llama/Llama-3.1-8B-Instruct",
    torch_dtype=torch.bfloat16,
    quantization_config=TorchAoConfig(quant_type=per_module),
)
