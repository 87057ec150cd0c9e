from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
inputs = tokenizer(["Summarise: ..."], return_tensors="pt")
summary = model.generate(**inputs, max_new_tokens=512, use_cache=False)
