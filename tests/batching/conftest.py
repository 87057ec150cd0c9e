"""Fixtures for the batching tests: tiny fp32 models loaded once, stats reset per test."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def llama_model(tiny_llama_dir):
    transformers = pytest.importorskip("transformers")
    import torch

    return transformers.AutoModelForCausalLM.from_pretrained(
        tiny_llama_dir, dtype=torch.float32
    ).eval()


@pytest.fixture(scope="session")
def qwen2_model(tiny_qwen2_dir):
    transformers = pytest.importorskip("transformers")
    import torch

    return transformers.AutoModelForCausalLM.from_pretrained(
        tiny_qwen2_dir, dtype=torch.float32
    ).eval()


@pytest.fixture(params=["llama", "qwen2"])
def model(request):
    return request.getfixturevalue(f"{request.param}_model")


@pytest.fixture(autouse=True)
def _fresh_stats():
    from ecoguard.batching import close_all, reset_batching_stats

    reset_batching_stats()
    yield
    close_all()
    reset_batching_stats()
