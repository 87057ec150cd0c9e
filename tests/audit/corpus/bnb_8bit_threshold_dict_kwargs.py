from transformers import AutoModelForCausalLM, BitsAndBytesConfig

quant_kwargs = dict(load_in_8bit=True, llm_int8_threshold=6.0)
cfg = BitsAndBytesConfig(**quant_kwargs)
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct", quantization_config=cfg)
