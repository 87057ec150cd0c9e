"""coalescing_generate (the guard's hook) and its per-model registry."""

from __future__ import annotations

import contextvars
import gc

import pytest

torch = pytest.importorskip("torch")

from batching_helpers import make_prompts, rows_of, run_concurrently  # noqa: E402

from ecoguard.batching import (  # noqa: E402
    INSIDE_BATCH,
    batcher_for,
    batching_stats,
    coalescing_generate,
)
from ecoguard.batching import hook as hook_module  # noqa: E402
from ecoguard.config import Settings  # noqa: E402


def test_hook_coalesces_concurrent_calls(qwen2_model):
    model = qwen2_model
    calls = make_prompts(6, seed=21)
    settings = Settings(batching=True, max_batch_size=rows_of(calls), max_wait_ms=30_000)
    alone = [model.generate(**c, max_new_tokens=6, do_sample=False) for c in calls]
    seen_runs = []

    def wrapped(*args, **kwargs):  # stands in for the guard's unpatched generate
        seen_runs.append(kwargs["input_ids"].shape[0])
        return model.generate(*args, **kwargs)

    got = run_concurrently(
        lambda i: coalescing_generate(
            wrapped, model, (), {**calls[i], "max_new_tokens": 6, "do_sample": False}, settings
        ),
        len(calls),
    )
    for lone, mine in zip(alone, got, strict=True):
        assert torch.equal(mine, lone)
    assert seen_runs == [rows_of(calls)]  # one executed call, holding every row
    assert batching_stats()["batch_size_histogram"] == {6: 1}


def test_hook_passes_through_when_batching_is_off(llama_model):
    model = llama_model
    ids = torch.tensor([[5, 6, 7]])
    calls = []

    def wrapped(*args, **kwargs):
        calls.append((args, kwargs))
        return model.generate(*args, **kwargs)

    out = coalescing_generate(
        wrapped, model, (ids,), {"max_new_tokens": 3}, Settings(batching=False)
    )
    assert out.shape == (1, 6)
    assert calls == [((ids,), {"max_new_tokens": 3})]  # untouched
    assert batching_stats()["requests_total"] == 0


def test_hook_does_not_recoalesce_inside_a_batch(llama_model):
    """A user's Batcher calling a guarded generate reaches the hook with INSIDE_BATCH set: the
    call goes straight through (no second wait, no second batch)."""
    model = llama_model
    settings = Settings(batching=True, max_wait_ms=30_000)

    def call():
        INSIDE_BATCH.set(True)
        return coalescing_generate(
            model.generate, model, (torch.tensor([[5, 6, 7]]),), {"max_new_tokens": 3}, settings
        )

    out = contextvars.copy_context().run(call)
    assert out.shape == (1, 6)
    assert batching_stats()["requests_total"] == 0


def test_registry_is_per_model_and_follows_settings():
    class FakeModel:
        def generate(self, *args, **kwargs):
            raise AssertionError("not called")

    model = FakeModel()
    first = batcher_for(model, Settings(batching=True, max_batch_size=8, max_wait_ms=5))
    assert batcher_for(model, Settings(batching=True, max_batch_size=8, max_wait_ms=5)) is first
    assert (first.max_batch_size, first.max_wait_ms) == (8, 5.0)
    second = batcher_for(model, Settings(batching=True, max_batch_size=4, max_wait_ms=5))
    assert second is not first and first.closed and second.max_batch_size == 4
    assert batcher_for(FakeModel(), Settings(batching=True)) is not second

    del model
    gc.collect()
    assert second.model is None  # the registry holds models weakly
    assert len([m for m in hook_module._registry if isinstance(m, FakeModel)]) == 0
