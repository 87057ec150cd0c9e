from transformers import BitsAndBytesConfig, pipeline

chat = pipeline(
    "text-generation",
    model="Qwen/Qwen2.5-0.5B-Instruct",
    model_kwargs={"quantization_config": BitsAndBytesConfig(load_in_4bit=True)},
)
print(chat("Hi there", max_new_tokens=32))
