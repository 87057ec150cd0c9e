"""Notes on quantization.

Never write BitsAndBytesConfig(load_in_8bit=True) without llm_int8_threshold=0.0, and do not
call model.generate( inside a for loop: see the docs.
"""

# from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", load_in_4bit=True)  <- old advice
# quantization_config = TorchAoConfig(Float8WeightOnlyConfig())

HELP = "pass load_in_8bit=True to from_pretrained and use_cache=False in generate()"
EXAMPLE = "model.generate(input_ids, use_cache=False)"


def describe(option: str) -> str:
    return f"{option}: see https://huggingface.co/docs (e.g. load_in_8bit=True)"
