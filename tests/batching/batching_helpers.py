"""Shared helpers for the batching tests (prompts of varied lengths, concurrent callers)."""

from __future__ import annotations

import threading

import torch


def make_prompts(count: int, seed: int = 0) -> list[dict]:
    """Caller inputs: one-row prompts of lengths 2..14, and every third caller a two-row prompt
    left-padded by itself (pad id 0) with an explicit attention mask."""
    gen = torch.Generator().manual_seed(seed)
    calls = []
    for i in range(count):
        length = 2 + (i * 5) % 13
        if i % 3 == 2:
            ids = torch.randint(3, 256, (2, length), generator=gen)
            mask = torch.ones_like(ids)
            ids[1, :2] = 0
            mask[1, :2] = 0
            calls.append({"input_ids": ids, "attention_mask": mask})
        else:
            calls.append({"input_ids": torch.randint(3, 256, (1, length), generator=gen)})
    return calls


def rows_of(calls: list[dict]) -> int:
    return sum(int(c["input_ids"].shape[0]) for c in calls)


def run_concurrently(fn, count: int) -> list:
    """Call ``fn(i)`` on ``count`` threads released together; results or exceptions by index."""
    results: list = [None] * count
    barrier = threading.Barrier(count)

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a caller never returned (deadlock?)"
    return results


def early_eos(model, calls, max_new_tokens: int) -> int:
    """A token the model emits a few steps into one prompt's greedy output: used as EOS so that
    rows finish at different steps and the pad-after-EOS trimming is exercised."""
    out = model.generate(**calls[1], max_new_tokens=max_new_tokens, do_sample=False)
    return int(out[0, calls[1]["input_ids"].shape[1] + 2])
