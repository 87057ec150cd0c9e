from vllm import LLM

engine_args = {"model": "Qwen/Qwen2.5-1.5B-Instruct-AWQ", "quantization": "awq", "gpu_memory_utilization": 0.8}
llm = LLM(**engine_args)
