import torch
from torchao.quantization import Float8WeightOnlyConfig, quantize_
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct", torch_dtype=torch.bfloat16).cuda()
quantize_(model, Float8WeightOnlyConfig())
model.forward = torch.compile(model.forward, mode="max-autotune")
