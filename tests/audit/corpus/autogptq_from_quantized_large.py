from auto_gptq import AutoGPTQForCausalLM
from transformers import AutoTokenizer

repo = "TheBloke/Llama-2-13B-chat-GPTQ"
tokenizer = AutoTokenizer.from_pretrained(repo, use_fast=True)
model = AutoGPTQForCausalLM.from_quantized(repo, device="cuda:0", use_safetensors=True)
