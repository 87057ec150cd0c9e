"""Quantization presets imported by the serving code."""

import torch
from transformers import BitsAndBytesConfig

INT8 = BitsAndBytesConfig(load_in_8bit=True)
INT8_PURE = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)
NF4 = BitsAndBytesConfig(
    load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
)
