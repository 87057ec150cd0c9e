from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
model.gradient_checkpointing_enable()
model.config.use_cache = False  # required with gradient checkpointing during training

trainer = Trainer(model=model, args=TrainingArguments(output_dir="out"))
trainer.train()
