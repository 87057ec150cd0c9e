from vllm import LLM

# vLLM's fp8 runs fused kernels (CUDA graphs, compiled): not torchao's eager path.
llm = LLM(model="meta-llama/Llama-3.1-8B-Instruct", quantization="fp8")
