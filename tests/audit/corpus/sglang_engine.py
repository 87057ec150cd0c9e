import sglang as sgl

llm = sgl.Engine(model_path="Qwen/Qwen2.5-1.5B-Instruct-AWQ", quantization="awq")
print(llm.generate(["Hello"], {"max_new_tokens": 32}))
