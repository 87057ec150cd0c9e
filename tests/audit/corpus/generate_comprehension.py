from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
lm = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
prompts = ["Translate to French: hello", "Translate to French: goodbye"]
outputs = [lm.generate(**tok(p, return_tensors="pt"), max_new_tokens=32) for p in prompts]
