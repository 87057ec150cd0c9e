import itertools

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

MODEL_ID = "meta-llama/Llama-3.1-8B-Instruct"
BATCH_SIZE = 16
tokenizer = AutoTokenizer.from_pretrained(MODEL_ID, padding_side="left")
model = AutoModelForCausalLM.from_pretrained(MODEL_ID, torch_dtype=torch.bfloat16)


def run_sliced(prompts):
    outputs = []
    for start in range(0, len(prompts), BATCH_SIZE):
        chunk = prompts[start : start + BATCH_SIZE]
        inputs = tokenizer(chunk, return_tensors="pt", padding=True)
        outputs.extend(model.generate(**inputs, max_new_tokens=64))
    return outputs


def run_batched(prompts):
    for batch in itertools.batched(prompts, BATCH_SIZE):
        inputs = tokenizer(list(batch), return_tensors="pt", padding=True)
        yield model.generate(**inputs, max_new_tokens=64)


def run_all_at_once(prompts):
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    return model.generate(**inputs, max_new_tokens=64)
