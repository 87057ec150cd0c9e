from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-7B-Instruct")
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct", device_map="auto")

def gen(prompt):
    enc = tok(prompt, return_tensors="pt").to(model.device)
    return tok.decode(model.generate(**enc, max_new_tokens=64)[0], skip_special_tokens=True)

ds = load_dataset("openai/gsm8k", "main", split="test")
ds = ds.map(lambda ex: {"completion": gen(ex["question"])})
