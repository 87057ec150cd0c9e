"""A first config replaced before anything reads it; a second one read (aliased) first."""

from transformers import AutoModelForCausalLM, BitsAndBytesConfig

cfg = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=6.0)
cfg = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)
model = AutoModelForCausalLM.from_pretrained("mistralai/Mistral-7B-v0.1", quantization_config=cfg)

shared = BitsAndBytesConfig(load_in_8bit=True)
exported = shared
shared = None
