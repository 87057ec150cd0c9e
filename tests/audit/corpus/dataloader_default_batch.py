from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")


def evaluate(dataset):
    for example in DataLoader(dataset):
        model.generate(input_ids=example["input_ids"], max_new_tokens=16)
    for batch in DataLoader(dataset, batch_size=32):
        model.generate(input_ids=batch["input_ids"], max_new_tokens=16)
