import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

MODEL_ID = "meta-llama/Llama-3.1-8B-Instruct"
tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)
model = AutoModelForCausalLM.from_pretrained(
    MODEL_ID, torch_dtype=torch.bfloat16, device_map="auto"
)


def answer_all(questions):
    answers = []
    for question in questions:
        inputs = tokenizer(question, return_tensors="pt").to(model.device)
        output = model.generate(**inputs, max_new_tokens=128)
        answers.append(tokenizer.decode(output[0], skip_special_tokens=True))
    return answers
