"""Builds the model the fine-tuning job trains (the trainer lives in train.py)."""

import torch
from transformers import AutoModelForCausalLM


def build_model(model_id: str):
    # Training setup: the KV cache is useless with gradient checkpointing, turn it off.
    model = AutoModelForCausalLM.from_pretrained(
        model_id, torch_dtype=torch.bfloat16, use_cache=False
    )
    model.config.use_cache = False  # re-enabled for inference after training
    return model
