from transformers import pipeline

qa = pipeline(
    "text-generation",
    model="mistralai/Mistral-7B-Instruct-v0.3",
    model_kwargs={"load_in_8bit": True},
    device_map="auto",
)
