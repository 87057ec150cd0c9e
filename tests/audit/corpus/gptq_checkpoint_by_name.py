from transformers import AutoModelForCausalLM, AutoTokenizer

# A pre-quantized checkpoint: its config carries the GPTQ settings.
repo = "Qwen/Qwen2.5-0.5B-Instruct-GPTQ-Int4"
tokenizer = AutoTokenizer.from_pretrained(repo)
model = AutoModelForCausalLM.from_pretrained(repo, device_map="auto")

big = AutoModelForCausalLM.from_pretrained("TheBloke/Llama-2-13B-chat-GPTQ", device_map="auto")
