import os

from transformers import AutoModelForCausalLM, BitsAndBytesConfig

# The threshold comes from the deployment environment: the audit cannot know it.
threshold = float(os.environ.get("INT8_THRESHOLD", "0"))
config = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=threshold)
model = AutoModelForCausalLM.from_pretrained(
    "meta-llama/Llama-3.1-8B-Instruct", quantization_config=config
)
