from transformers import AutoModelForCausalLM, BitsAndBytesConfig

INT8_THRESHOLD = 0.0  # pure int8 matmuls
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def load():
    config = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=INT8_THRESHOLD)
    return AutoModelForCausalLM.from_pretrained(MODEL, quantization_config=config)
