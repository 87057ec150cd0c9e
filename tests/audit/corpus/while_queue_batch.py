import queue
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B-Instruct", padding_side="left")
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct", device_map="auto")
requests = queue.Queue()

def worker():
    while True:
        pending = [requests.get()]
        while not requests.empty() and len(pending) < 16:
            pending.append(requests.get_nowait())
        enc = tok(pending, return_tensors="pt", padding=True).to(model.device)
        model.generate(**enc, max_new_tokens=128)
