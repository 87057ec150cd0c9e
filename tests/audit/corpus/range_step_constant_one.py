import json

from transformers import AutoModelForCausalLM, AutoTokenizer

BATCH_SIZE = 1  # OOM with more
tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-7B-Instruct")
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct", device_map="auto")

records = [json.loads(line) for line in open("eval.jsonl")]
questions = [r["question"] for r in records]
answers = []
for start in range(0, len(questions), BATCH_SIZE):
    chunk = questions[start : start + BATCH_SIZE]
    enc = tokenizer(chunk, return_tensors="pt", padding=True).to(model.device)
    answers.extend(model.generate(**enc, max_new_tokens=256))
