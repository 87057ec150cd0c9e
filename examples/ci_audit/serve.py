"""A small serving script with two energy traps, for `ecoguard audit examples/ci_audit`.

Never run by the audit: it is read as text. Expected findings: int8-mixed (line 9),
batch-size-one (line 21).
"""

from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

QUANT = BitsAndBytesConfig(load_in_8bit=True)  # fix: add llm_int8_threshold=0.0
MODEL_ID = "mistralai/Mistral-7B-Instruct-v0.3"

tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)
model = AutoModelForCausalLM.from_pretrained(MODEL_ID, quantization_config=QUANT)


def answer(questions: list[str]) -> list[str]:
    """One generate call per question: batch size one for the whole list."""
    replies = []
    for question in questions:
        inputs = tokenizer(question, return_tensors="pt").to(model.device)
        output = model.generate(**inputs, max_new_tokens=64)
        replies.append(tokenizer.decode(output[0], skip_special_tokens=True))
    return replies
