from torch.utils.data import DataLoader
from tqdm import tqdm
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct", device_map="auto")

def run(ds, collate):
    loader = DataLoader(ds, batch_size=8, collate_fn=collate)
    for batch in tqdm(loader):
        yield model.generate(**batch, max_new_tokens=64)
