from transformers import AutoModelForCausalLM

# transformers 4.x style, still in many tutorials
model = AutoModelForCausalLM.from_pretrained(
    "meta-llama/Llama-3.1-8B-Instruct",
    load_in_8bit=True,
    device_map="auto",
)
