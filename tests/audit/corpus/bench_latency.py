import time
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct", torch_dtype=torch.float16).cuda()
inputs = tok("The meaning of life is", return_tensors="pt").to("cuda")
times = []
for _ in range(50):
    t0 = time.perf_counter()
    model.generate(**inputs, max_new_tokens=128)
    times.append(time.perf_counter() - t0)
print(sum(times) / len(times))
