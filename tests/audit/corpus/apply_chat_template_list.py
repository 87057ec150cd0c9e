from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-7B-Instruct", padding_side="left")
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct", device_map="auto")

def answer_all(questions):
    msgs = [[{"role": "user", "content": q}] for q in questions]
    enc = tok.apply_chat_template(msgs, padding=True, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    return model.generate(**enc.to(model.device), max_new_tokens=128)
