from awq import AutoAWQForCausalLM
from transformers import AutoTokenizer

quant_path = "TheBloke/TinyLlama-1.1B-Chat-v1.0-AWQ"

model = AutoAWQForCausalLM.from_quantized(quant_path, fuse_layers=True)
tokenizer = AutoTokenizer.from_pretrained(quant_path, trust_remote_code=True)

tokens = tokenizer("Tell me a joke about compilers.", return_tensors="pt").input_ids.cuda()
output = model.generate(tokens, max_new_tokens=64)
print(tokenizer.decode(output[0]))
