import pandas as pd
import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

tqdm.pandas()

MODEL_ID = "Qwen/Qwen2.5-7B-Instruct"
tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)
model = AutoModelForCausalLM.from_pretrained(
    MODEL_ID, torch_dtype=torch.bfloat16, device_map="auto"
)


def label_review(text):
    messages = [
        {"role": "system", "content": "Answer with positive, negative or neutral."},
        {"role": "user", "content": text},
    ]
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt"
    ).to(model.device)
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
    return tokenizer.decode(out[0][ids.shape[-1] :], skip_special_tokens=True).strip()


def word_count(text):
    return len(text.split())


reviews = pd.read_csv("reviews.csv")
reviews["words"] = reviews["review"].apply(word_count)
reviews["label"] = reviews["review"].progress_apply(label_review)
reviews.to_csv("labelled.csv", index=False)
