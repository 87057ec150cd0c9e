"""Summarise the test split with a text-generation pipeline."""

from datasets import load_dataset
from transformers import pipeline
from transformers.pipelines.pt_utils import KeyDataset

dataset = load_dataset("imdb", split="test")
summarizer = pipeline("text-generation", model="Qwen/Qwen2.5-7B-Instruct", device=0)

summaries = []
for out in summarizer(KeyDataset(dataset, "text"), max_new_tokens=48, return_full_text=False):
    summaries.append(out[0]["generated_text"])

dataset = dataset.add_column("summary", summaries)
dataset.to_json("summaries.jsonl")
