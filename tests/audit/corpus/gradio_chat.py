import gradio as gr
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-7B-Instruct")
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct", device_map="auto")

def respond(message, history):
    ids = tok.apply_chat_template(history + [{"role": "user", "content": message}], add_generation_prompt=True, return_tensors="pt").to(model.device)
    out = model.generate(ids, max_new_tokens=512)
    return tok.decode(out[0][ids.shape[-1]:], skip_special_tokens=True)

gr.ChatInterface(respond, type="messages").launch()
