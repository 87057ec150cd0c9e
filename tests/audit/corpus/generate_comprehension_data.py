from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
lm = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
with open("prompts.txt") as handle:
    prompts = handle.read().splitlines()
outputs = [lm.generate(**tok(p, return_tensors="pt"), max_new_tokens=32) for p in prompts]
