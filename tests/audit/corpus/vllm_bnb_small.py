from vllm import LLM, SamplingParams

llm = LLM(model="Qwen/Qwen2.5-1.5B-Instruct", quantization="bitsandbytes")
params = SamplingParams(max_tokens=128)
outputs = llm.generate(["Hello", "Bonjour"], params)
