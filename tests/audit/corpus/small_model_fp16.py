import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", torch_dtype=torch.float16)
for q in ["2+2?", "Capital of Japan?", "Largest planet?"]:
    print(tok.decode(model.generate(**tok(q, return_tensors="pt"), max_new_tokens=16)[0]))
