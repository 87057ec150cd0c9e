from concurrent.futures import ThreadPoolExecutor
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct", device_map="auto")

def answer(q):
    return model.generate(**tok(q, return_tensors="pt").to(model.device), max_new_tokens=100)

def run(questions):
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(answer, questions))
