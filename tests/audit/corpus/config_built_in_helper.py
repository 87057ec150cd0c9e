from transformers import AutoModelForCausalLM, BitsAndBytesConfig


def eight_bit_config():
    """Shared 8-bit settings for every model we serve."""
    config = BitsAndBytesConfig(
        load_in_8bit=True,
        llm_int8_skip_modules=["lm_head"],
    )
    return config


def load_model(model_id="meta-llama/Llama-3.1-8B-Instruct"):
    return AutoModelForCausalLM.from_pretrained(
        model_id, quantization_config=eight_bit_config(), device_map="auto"
    )
