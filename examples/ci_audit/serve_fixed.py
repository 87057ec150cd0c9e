"""The same script with both traps fixed: the audit reports nothing here."""

from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

QUANT = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)
MODEL_ID = "mistralai/Mistral-7B-Instruct-v0.3"

tokenizer = AutoTokenizer.from_pretrained(MODEL_ID, padding_side="left")
model = AutoModelForCausalLM.from_pretrained(MODEL_ID, quantization_config=QUANT)


def answer(questions: list[str]) -> list[str]:
    """All questions in one padded batch."""
    inputs = tokenizer(questions, return_tensors="pt", padding=True).to(model.device)
    outputs = model.generate(**inputs, max_new_tokens=64)
    return tokenizer.batch_decode(outputs, skip_special_tokens=True)
