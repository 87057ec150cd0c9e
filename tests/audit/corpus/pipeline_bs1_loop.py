from transformers import pipeline

generator = pipeline(
    "text-generation", model="meta-llama/Llama-3.1-8B-Instruct", device_map="auto", batch_size=1
)

with open("questions.txt") as handle:
    for question in handle:
        result = generator(question, max_new_tokens=64)
        print(result[0]["generated_text"])
