from vllm import LLM, SamplingParams

llm = LLM(model="meta-llama/Llama-3.1-8B-Instruct")
sp = SamplingParams(max_tokens=200)
prompts = open("prompts.txt").read().splitlines()
all_at_once = llm.generate(prompts, sp)
one_by_one = [llm.generate([p], sp)[0] for p in prompts]
