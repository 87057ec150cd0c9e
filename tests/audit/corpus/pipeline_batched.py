from transformers import pipeline

generator = pipeline("text-generation", model="meta-llama/Llama-3.1-8B-Instruct", device_map="auto")
questions = ["What is a GPU?", "What is a joule?", "Why batch requests?"]
results = generator(questions, batch_size=16, max_new_tokens=64)
