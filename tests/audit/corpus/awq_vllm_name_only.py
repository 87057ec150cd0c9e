from vllm import LLM, SamplingParams

llm = LLM("TheBloke/TinyLlama-1.1B-Chat-v1.0-AWQ")
print(llm.generate(["Hi"], SamplingParams(max_tokens=32)))
