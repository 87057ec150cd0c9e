from transformers import AutoModelForCausalLM, BitsAndBytesConfig

# Pure INT8: llm_int8_threshold=0.0 disables the fp16 outlier path.
config = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)
model = AutoModelForCausalLM.from_pretrained(
    "meta-llama/Llama-3.1-8B-Instruct", quantization_config=config
)
