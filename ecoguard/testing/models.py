"""Tiny causal LMs built from a config, for tests and the offline demo (no hub download).

``build_tiny_model(path, family="llama")`` writes a randomly initialised model with a real
tokenizer-free setup: callers pass ``input_ids`` directly. Weights are deterministic (seeded).
"""

from __future__ import annotations

from pathlib import Path

FAMILIES = ("llama", "qwen2")


def tiny_config(family: str = "llama", *, hidden_size: int = 64, layers: int = 2, vocab: int = 256):
    """A transformers config for a tiny model of ``family`` (``llama`` or ``qwen2``).

    Dimensions are multiples of 64 so bitsandbytes and torchao kernels accept the Linear layers.
    """
    import transformers

    common = dict(
        vocab_size=vocab,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    if family == "llama":
        return transformers.LlamaConfig(**common)
    if family == "qwen2":
        return transformers.Qwen2Config(**common)
    raise ValueError(f"unknown tiny model family {family!r}; accepted: {', '.join(FAMILIES)}")


def build_tiny_model(
    path: str | Path, family: str = "llama", *, seed: int = 0, **config_kwargs: int
) -> Path:
    """Create, seed and save a tiny model of ``family`` under ``path``; returns the path."""
    import torch
    import transformers

    config = tiny_config(family, **config_kwargs)
    torch.manual_seed(seed)
    model_cls = {
        "llama": transformers.LlamaForCausalLM,
        "qwen2": transformers.Qwen2ForCausalLM,
    }[family]
    model = model_cls(config)
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    return path
