from datasets import load_dataset
from transformers import pipeline
from transformers.pipelines.pt_utils import KeyDataset

ds = load_dataset("ag_news", split="test[:2000]")
generator = pipeline("text-generation", model="Qwen/Qwen2.5-7B-Instruct", device_map="auto")
generator.tokenizer.padding_side = "left"

# One call over the whole dataset, fed to the model 16 rows at a time.
for out in generator(KeyDataset(ds, "text"), batch_size=16, max_new_tokens=32):
    print(out[0]["generated_text"])

# A single prompt is one request, not a dataset.
print(generator("Write a haiku about GPUs.", max_new_tokens=40))
