from datasets import load_dataset
from trl import SFTConfig, SFTTrainer
from unsloth import FastLanguageModel

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/Meta-Llama-3.1-8B-bnb-4bit",
    max_seq_length=2048,
    dtype=None,
    load_in_4bit=True,
)
model = FastLanguageModel.get_peft_model(model, r=16, lora_alpha=16, use_gradient_checkpointing="unsloth")

dataset = load_dataset("yahma/alpaca-cleaned", split="train")
trainer = SFTTrainer(
    model=model,
    train_dataset=dataset,
    args=SFTConfig(per_device_train_batch_size=2, max_steps=60, output_dir="outputs"),
)
trainer.train()
