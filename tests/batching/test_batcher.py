"""The Batcher gives each caller exactly its lone result, and really coalesces.

Real tiny Llama / Qwen2 models in fp32, greedy decoding, prompts of varied lengths (some callers
bring several rows with their own left padding). Groups are made deterministic without sleeps:
with a long ``max_wait_ms``, a group is sealed the moment it reaches ``max_batch_size`` rows.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from batching_helpers import early_eos, make_prompts, rows_of, run_concurrently  # noqa: E402

from ecoguard.batching import Batcher, batching_stats  # noqa: E402
from ecoguard.errors import UsageError  # noqa: E402

LONG_WAIT_MS = 30_000.0  # never reached in a passing test: groups seal when full


@pytest.mark.parametrize("eos_kind", ["default", "early"])
def test_greedy_tokens_equal_lone_calls(model, eos_kind):
    calls = make_prompts(8)
    gen_kwargs = {"max_new_tokens": 10, "do_sample": False}
    if eos_kind == "early":
        gen_kwargs["eos_token_id"] = early_eos(model, calls, 10)
    alone = [model.generate(**c, **gen_kwargs) for c in calls]
    if eos_kind == "early":  # the EOS really did shorten some lone outputs
        assert (
            len({a.shape[1] - c["input_ids"].shape[1] for a, c in zip(alone, calls, strict=True)})
            > 1
        )

    with Batcher(model, max_batch_size=rows_of(calls), max_wait_ms=LONG_WAIT_MS) as batcher:
        got = run_concurrently(lambda i: batcher.generate(**calls[i], **gen_kwargs), len(calls))

    for lone, mine in zip(alone, got, strict=True):
        assert not isinstance(mine, Exception), mine
        assert mine.shape == lone.shape
        assert torch.equal(mine, lone)
    stats = batching_stats()
    assert stats["batch_size_histogram"] == {8: 1}
    assert stats["requests_coalesced"] == 8


def test_return_dict_output_is_shaped_as_alone(llama_model):
    model = llama_model
    calls = make_prompts(4, seed=3)
    gen_kwargs = {
        "max_new_tokens": 6,
        "do_sample": False,
        "return_dict_in_generate": True,
        "output_scores": True,
        "output_logits": True,
    }
    gen_kwargs["eos_token_id"] = early_eos(model, calls, 6)
    alone = [model.generate(**c, **gen_kwargs) for c in calls]
    with Batcher(model, max_batch_size=rows_of(calls), max_wait_ms=LONG_WAIT_MS) as batcher:
        got = run_concurrently(lambda i: batcher.generate(**calls[i], **gen_kwargs), len(calls))
    for lone, mine in zip(alone, got, strict=True):
        assert type(mine) is type(lone)
        assert torch.equal(mine.sequences, lone.sequences)
        for field in ("scores", "logits"):
            assert len(getattr(mine, field)) == len(getattr(lone, field))
            for a, b in zip(getattr(mine, field), getattr(lone, field), strict=True):
                assert a.shape == b.shape
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        for a, b in zip(mine.cache.layers, lone.cache.layers, strict=True):
            assert a.keys.shape == b.keys.shape
            torch.testing.assert_close(a.keys, b.keys, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(a.values, b.values, rtol=1e-4, atol=1e-4)
    assert batching_stats()["batch_size_histogram"] == {4: 1}


def test_prompt_padding_inferred_when_no_mask_given(llama_model):
    """A caller that left-pads with the pad id but passes no mask gets the mask transformers
    would have inferred, so its tokens still match."""
    model = llama_model
    ids = torch.tensor([[0, 0, 17, 42, 99], [5, 6, 7, 8, 9]])
    other = {"input_ids": torch.tensor([[11, 12]])}
    alone = model.generate(ids, max_new_tokens=6, do_sample=False)
    with Batcher(model, max_batch_size=3, max_wait_ms=LONG_WAIT_MS) as batcher:
        got = run_concurrently(
            lambda i: (
                batcher.generate(ids, max_new_tokens=6, do_sample=False)
                if i == 0
                else batcher.generate(**other, max_new_tokens=6, do_sample=False)
            ),
            2,
        )
    assert torch.equal(got[0], alone)
    assert batching_stats()["batch_size_histogram"] == {2: 1}


def test_incompatible_settings_form_separate_batches(llama_model):
    model = llama_model
    calls = make_prompts(8, seed=5)
    calls = [c for c in calls if c["input_ids"].shape[0] == 1][:4] * 2  # eight one-row callers
    new_tokens = [4 if i % 2 else 7 for i in range(8)]
    alone = [
        model.generate(**c, max_new_tokens=n, do_sample=False)
        for c, n in zip(calls, new_tokens, strict=True)
    ]
    with Batcher(model, max_batch_size=4, max_wait_ms=LONG_WAIT_MS) as batcher:
        got = run_concurrently(
            lambda i: batcher.generate(**calls[i], max_new_tokens=new_tokens[i], do_sample=False),
            8,
        )
    for lone, mine in zip(alone, got, strict=True):
        assert torch.equal(mine, lone)
    assert batching_stats()["batch_size_histogram"] == {4: 2}


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"max_new_tokens": 5, "repetition_penalty": 1.3}, "kwarg:repetition_penalty"),
        ({"max_length": 12}, "kwarg:max_length"),
        ({}, "max-new-tokens"),
        ({"max_new_tokens": 5, "num_beams": 2}, "beam-search"),
    ],
)
@pytest.mark.filterwarnings("ignore:Using the model-agnostic default")
def test_ineligible_calls_run_alone_untouched(llama_model, kwargs, reason):
    model = llama_model
    ids = torch.tensor([[4, 8, 15, 16, 23]])
    alone = model.generate(ids, do_sample=False, **kwargs)
    with Batcher(model, max_wait_ms=LONG_WAIT_MS) as batcher:
        start = time.monotonic()
        got = batcher.generate(ids, do_sample=False, **kwargs)
        elapsed_s = time.monotonic() - start
    assert torch.equal(got, alone)
    assert elapsed_s < 10, "an ineligible call must not wait for partners"
    stats = batching_stats()
    assert stats["ineligible"] == {reason: 1}
    assert stats["batches_total"] == 0


def test_no_pad_token_runs_alone(llama_model):
    model = llama_model
    saved = model.generation_config.pad_token_id
    model.generation_config.pad_token_id = None
    try:
        ids = torch.tensor([[4, 8, 15]])
        with Batcher(model, max_wait_ms=LONG_WAIT_MS) as batcher:
            got = batcher.generate(ids, max_new_tokens=3, do_sample=False)
        assert got.shape == (1, 6)
    finally:
        model.generation_config.pad_token_id = saved
    assert batching_stats()["ineligible"] == {"no-pad-token": 1}


def test_bad_caller_fails_alone(llama_model):
    """A token id outside the vocabulary breaks the batched call; every caller is re-run alone,
    so only the bad one sees the error."""
    model = llama_model
    calls = [*make_prompts(4, seed=9)[:2], {"input_ids": torch.tensor([[5, 99999, 7]])}]
    calls.append({"input_ids": torch.tensor([[9, 10, 11, 12]])})
    good = [i for i in range(4) if i != 2]
    alone = {i: model.generate(**calls[i], max_new_tokens=5, do_sample=False) for i in good}
    with Batcher(model, max_batch_size=rows_of(calls), max_wait_ms=LONG_WAIT_MS) as batcher:
        got = run_concurrently(
            lambda i: batcher.generate(**calls[i], max_new_tokens=5, do_sample=False), 4
        )
    assert isinstance(got[2], Exception)
    for i in good:
        assert torch.equal(got[i], alone[i])
    stats = batching_stats()
    assert stats["fallbacks"] == 1
    assert stats["fallback_requests"] == 4


def test_lone_caller_waits_at_most_max_wait(llama_model):
    model = llama_model
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    model.generate(ids, max_new_tokens=4, do_sample=False)  # warm up
    start = time.monotonic()
    alone = model.generate(ids, max_new_tokens=4, do_sample=False)
    compute_s = time.monotonic() - start
    max_wait_ms = 80.0
    with Batcher(model, max_wait_ms=max_wait_ms) as batcher:
        start = time.monotonic()
        got = batcher.generate(ids, max_new_tokens=4, do_sample=False)
        elapsed_s = time.monotonic() - start
    assert torch.equal(got, alone)
    # It waited for the window (nobody came), then ran: window + compute, with scheduler slack.
    assert elapsed_s >= max_wait_ms / 1000 * 0.9
    assert elapsed_s < max_wait_ms / 1000 + 3 * compute_s + 0.5
    assert batching_stats()["batch_size_histogram"] == {1: 1}


def test_close_drains_pending_callers(llama_model):
    """Callers waiting in a group that will never fill are released by close(), which returns
    only after each has its (correct) result."""
    model = llama_model
    calls = [{"input_ids": torch.tensor([[7, 8, 9 + i]])} for i in range(3)]
    alone = [model.generate(**c, max_new_tokens=4, do_sample=False) for c in calls]
    batcher = Batcher(model, max_batch_size=64, max_wait_ms=60_000)
    results: list = [None] * 3
    threads = [
        threading.Thread(
            target=lambda i=i: results.__setitem__(
                i, batcher.generate(**calls[i], max_new_tokens=4, do_sample=False)
            )
        )
        for i in range(3)
    ]
    for t in threads:
        t.start()
    with batcher._lock:  # wait (no polling) until all three have joined the open group
        arrived = batcher._inflight_changed.wait_for(lambda: batcher._inflight >= 3, timeout=20)
    assert arrived, "callers never reached the batcher"
    start = time.monotonic()
    batcher.close()
    assert time.monotonic() - start < 20
    assert all(r is not None for r in results), "close() returned before draining"
    for t in threads:
        t.join(timeout=5)
    for lone, mine in zip(alone, results, strict=True):
        assert torch.equal(mine, lone)
    assert batching_stats()["batch_size_histogram"] == {3: 1}
    # After close, calls still work, alone.
    assert torch.equal(batcher.generate(**calls[0], max_new_tokens=4, do_sample=False), alone[0])
    batcher.close()  # idempotent


def test_many_threads_many_calls_no_deadlock(llama_model):
    model = llama_model
    calls = make_prompts(6, seed=11)
    budgets = (3, 4)
    alone = {
        (i, n): model.generate(**calls[i], max_new_tokens=n, do_sample=False)
        for i in range(len(calls))
        for n in budgets
    }
    with Batcher(model, max_batch_size=4, max_wait_ms=5.0) as batcher:

        def worker(t: int) -> list:
            out = []
            for k in range(3):
                i, n = (t + k) % len(calls), budgets[(t + k) % 2]
                out.append(
                    ((i, n), batcher.generate(**calls[i], max_new_tokens=n, do_sample=False))
                )
            return out

        got = run_concurrently(worker, 12)
    for per_thread in got:
        assert not isinstance(per_thread, Exception), per_thread
        for key, result in per_thread:
            assert torch.equal(result, alone[key])
    stats = batching_stats()
    assert stats["requests_total"] == 36
    assert stats["max_batch_size"] > 1
    assert max(stats["rows_histogram"]) <= 4


def test_agenerate_under_asyncio(qwen2_model):
    model = qwen2_model
    calls = [c for c in make_prompts(9, seed=2) if c["input_ids"].shape[0] == 1]
    alone = [model.generate(**c, max_new_tokens=5, do_sample=False) for c in calls]

    async def main(batcher: Batcher) -> list:
        ticks = 0

        async def ticker() -> None:  # the event loop keeps running while batches compute
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        tick_task = asyncio.create_task(ticker())
        results = await asyncio.gather(
            *(batcher.agenerate(**c, max_new_tokens=5, do_sample=False) for c in calls)
        )
        tick_task.cancel()
        assert ticks > 1
        return results

    with Batcher(model, max_batch_size=len(calls), max_wait_ms=LONG_WAIT_MS) as batcher:
        got = asyncio.run(main(batcher))
    for lone, mine in zip(alone, got, strict=True):
        assert torch.equal(mine, lone)
    assert batching_stats()["batch_size_histogram"] == {len(calls): 1}


@pytest.mark.parametrize(
    "kwargs",
    [{"max_batch_size": 0}, {"max_batch_size": 2.5}, {"max_wait_ms": -1}, {"max_wait_ms": 1e9}],
)
def test_bad_arguments_raise_usage_error(llama_model, kwargs):
    with pytest.raises(UsageError):
        Batcher(llama_model, **kwargs)


def test_model_without_generate_is_rejected():
    with pytest.raises(UsageError, match="generate"):
        Batcher(object())
