from transformers import AutoModelForCausalLM, AutoTokenizer, AwqConfig

model_id = "Qwen/Qwen2.5-1.5B-Instruct-AWQ"
quantization_config = AwqConfig(bits=4, fuse_max_seq_len=512, do_fuse=True)

tokenizer = AutoTokenizer.from_pretrained(model_id)
model = AutoModelForCausalLM.from_pretrained(
    model_id, quantization_config=quantization_config, device_map="cuda:0"
)
