from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("mistralai/Mistral-7B-Instruct-v0.3")
model = AutoModelForCausalLM.from_pretrained("mistralai/Mistral-7B-Instruct-v0.3")


def complete(prompt):
    inputs = tokenizer(prompt, return_tensors="pt")
    return model.generate(**inputs, max_new_tokens=256)


def main(rows):
    for row in rows:
        print(complete(row["prompt"]))
