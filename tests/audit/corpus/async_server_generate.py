from fastapi import FastAPI
from pydantic import BaseModel
from transformers import AutoModelForCausalLM, AutoTokenizer

app = FastAPI()
tok = AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct", device_map="auto")

class Req(BaseModel):
    prompt: str

@app.post("/generate")
async def generate(req: Req):
    ids = tok(req.prompt, return_tensors="pt").to(model.device)
    out = model.generate(**ids, max_new_tokens=256)
    return {"text": tok.decode(out[0], skip_special_tokens=True)}
