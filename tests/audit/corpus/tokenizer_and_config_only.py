from transformers import AutoConfig, AutoTokenizer

MODEL_ID = "Qwen/Qwen2.5-0.5B-Instruct"
config = AutoConfig.from_pretrained(MODEL_ID, load_in_8bit=True)
tokenizer = AutoTokenizer.from_pretrained(MODEL_ID, use_fast=True)
