import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

bnb_config = BitsAndBytesConfig(load_in_8bit=True)
LOAD_KWARGS = dict(
    quantization_config=bnb_config,
    torch_dtype=torch.float16,
    device_map="auto",
)

model = AutoModelForCausalLM.from_pretrained("mistralai/Mistral-7B-Instruct-v0.3", **LOAD_KWARGS)
