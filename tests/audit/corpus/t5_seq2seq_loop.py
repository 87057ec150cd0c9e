from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("google/flan-t5-large")
model = AutoModelForSeq2SeqLM.from_pretrained("google/flan-t5-large")

def summarize_all(docs):
    out = []
    for doc in docs:
        ids = tok("summarize: " + doc, return_tensors="pt", truncation=True).input_ids
        out.append(tok.decode(model.generate(ids, max_new_tokens=60)[0], skip_special_tokens=True))
    return out
