import queue

from transformers import AutoModelForCausalLM, AutoTokenizer

requests: queue.Queue = queue.Queue()
tokenizer = AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")


def worker():
    while True:
        request = requests.get()
        inputs = tokenizer(request.prompt, return_tensors="pt")
        request.reply(model.generate(**inputs, max_new_tokens=request.max_tokens))
