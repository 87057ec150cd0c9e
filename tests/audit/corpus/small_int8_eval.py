from transformers import AutoModelForCausalLM, BitsAndBytesConfig

cfg = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)
model = AutoModelForCausalLM.from_pretrained("google/gemma-2-2b-it", quantization_config=cfg)
