from transformers import AutoModelForCausalLM, BitsAndBytesConfig

PURE_INT8 = 0.0


def make_quant_config():
    return BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=PURE_INT8)


model = AutoModelForCausalLM.from_pretrained(
    "mistralai/Mistral-7B-Instruct-v0.3", quantization_config=make_quant_config()
)
