from huggingface_hub import InferenceClient

client = InferenceClient("http://localhost:8080")
for prompt in open("prompts.txt"):
    print(client.text_generation(prompt, max_new_tokens=64))
