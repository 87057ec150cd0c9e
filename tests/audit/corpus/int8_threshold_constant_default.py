from transformers import AutoModelForCausalLM, BitsAndBytesConfig

OUTLIER_THRESHOLD = 6.0
threshold = OUTLIER_THRESHOLD

bnb = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=threshold)
model = AutoModelForCausalLM.from_pretrained(
    "meta-llama/Llama-3.1-8B-Instruct", quantization_config=bnb
)
