import torch
from torchao.quantization import Float8WeightOnlyConfig, ModuleFqnToConfig, quantize_
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(
    "Qwen/Qwen2.5-7B-Instruct", torch_dtype=torch.bfloat16, device_map="cuda"
)
num_layers = model.config.num_hidden_layers
mlp_configs = {f"model.layers.{i}.mlp.down_proj": Float8WeightOnlyConfig() for i in range(num_layers)}
quantize_(model, ModuleFqnToConfig(mlp_configs))
