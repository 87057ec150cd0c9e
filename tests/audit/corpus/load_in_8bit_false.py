from transformers import AutoModelForCausalLM, BitsAndBytesConfig

USE_8BIT = False

config = BitsAndBytesConfig(load_in_8bit=USE_8BIT)
model = AutoModelForCausalLM.from_pretrained(
    "meta-llama/Llama-3.1-8B-Instruct", quantization_config=config
)
