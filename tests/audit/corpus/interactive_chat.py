from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")

while True:
    prompt = input("you> ")
    if not prompt:
        break
    ids = tokenizer(prompt, return_tensors="pt")
    print(tokenizer.decode(model.generate(**ids, max_new_tokens=200)[0]))
