import torch
from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, FqnToConfig, PerRow
from transformers import AutoModelForCausalLM, TorchAoConfig

MODEL_ID = "meta-llama/Llama-3.1-8B-Instruct"

fp8 = Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())
per_module = FqnToConfig({"_default": fp8, "lm_head": None})
quantization_config = TorchAoConfig(quant_type=per_module)

model = AutoModelForCausalLM.from_pretrained(
    MODEL_ID, torch_dtype=torch.bfloat16, device_map="cuda", quantization_config=quantization_config
)
