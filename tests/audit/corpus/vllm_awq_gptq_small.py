from vllm import LLM, SamplingParams

sampling = SamplingParams(temperature=0.7, max_tokens=256)

llm = LLM(model="Qwen/Qwen2.5-1.5B-Instruct-AWQ", quantization="awq", max_model_len=4096)
outputs = llm.generate(["Hello, my name is", "The future of AI is"], sampling)

gptq = LLM(model="Qwen/Qwen2.5-0.5B-Instruct-GPTQ-Int4", quantization="gptq")
fp8 = LLM(model="Qwen/Qwen2.5-1.5B-Instruct", quantization="fp8")
big = LLM(model="meta-llama/Llama-3.1-70B-Instruct", quantization="awq", tensor_parallel_size=4)
