import json
from transformers import pipeline

data = [json.loads(l) for l in open("gsm8k_test.jsonl")]
gen = pipeline("text-generation", model="meta-llama/Llama-3.1-8B-Instruct", device_map="auto")
outs = gen([ex["question"] for ex in data], max_new_tokens=256, do_sample=False)
