import pandas as pd
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-7B-Instruct")
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct", device_map="auto")
df = pd.read_csv("tickets.csv")
labels = []
for row in df.itertuples():
    enc = tok(f"Classify: {row.text}", return_tensors="pt").to(model.device)
    labels.append(tok.decode(model.generate(**enc, max_new_tokens=5)[0]))
