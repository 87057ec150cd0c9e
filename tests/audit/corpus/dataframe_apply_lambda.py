import pandas as pd
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("mistralai/Mistral-7B-Instruct-v0.3")
llm = AutoModelForCausalLM.from_pretrained("mistralai/Mistral-7B-Instruct-v0.3", device_map="auto")


def ask(question, context):
    prompt = f"Context: {context}\nQuestion: {question}\nAnswer:"
    enc = tok(prompt, return_tensors="pt").to(llm.device)
    gen = llm.generate(**enc, max_new_tokens=64)
    return tok.decode(gen[0], skip_special_tokens=True)


def build_prompt(row):
    return f"{row['context']} {row['question']}"


df = pd.read_parquet("squad_dev.parquet")
df["prompt"] = df.apply(build_prompt, axis=1)
df["answer"] = df.apply(lambda row: ask(row["question"], row["context"]), axis=1)
df.to_parquet("answers.parquet")
