from transformers import AutoModelForCausalLM, AutoTokenizer, GPTQConfig

model_id = "TheBloke/TinyLlama-1.1B-Chat-v1.0-GPTQ"
tokenizer = AutoTokenizer.from_pretrained(model_id)
# exllama kernels need a GPU with enough shared memory; fall back to the default kernels
gptq_config = GPTQConfig(bits=4, use_exllama=False)

model = AutoModelForCausalLM.from_pretrained(
    model_id, device_map="auto", quantization_config=gptq_config
)
inputs = tokenizer("What is GPTQ?", return_tensors="pt").to(model.device)
print(tokenizer.decode(model.generate(**inputs, max_new_tokens=50)[0]))
