from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct", device_map="auto")

# Warm-up: three calls before timing.
for _ in range(3):
    model.generate(**tokenizer("warm up", return_tensors="pt").to(model.device), max_new_tokens=8)

prompts = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]
for prompt in prompts:
    inputs = tokenizer(prompt, return_tensors="pt").to(model.device)
    out = model.generate(**inputs, max_new_tokens=20)
    print(tokenizer.decode(out[0], skip_special_tokens=True))

for question in ("What is 2 + 2?", "Name a prime number."):
    ids = tokenizer(question, return_tensors="pt").input_ids.to(model.device)
    print(tokenizer.decode(model.generate(ids, max_new_tokens=10)[0]))

EVAL_PROMPTS = [
    "Translate to French: good morning",
    "Translate to French: thank you",
    "Translate to French: see you tomorrow",
    "Translate to French: how are you",
    "Translate to French: the train is late",
    "Translate to French: I like coffee",
    "Translate to French: where is the station",
    "Translate to French: it is raining",
    "Translate to French: happy birthday",
    "Translate to French: good night",
]
for prompt in EVAL_PROMPTS:
    inputs = tokenizer(prompt, return_tensors="pt").to(model.device)
    print(tokenizer.decode(model.generate(**inputs, max_new_tokens=20)[0]))
