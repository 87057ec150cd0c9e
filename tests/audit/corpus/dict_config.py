from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(
    "meta-llama/Llama-3.1-8B-Instruct",
    quantization_config={"load_in_8bit": True, "llm_int8_skip_modules": ["lm_head"]},
)
