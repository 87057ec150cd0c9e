"""Batching through the one-line path: ecoguard.install(batching=True) and the guard's wrapper."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from batching_helpers import make_prompts, rows_of, run_concurrently  # noqa: E402

import ecoguard  # noqa: E402
from ecoguard import events  # noqa: E402
from ecoguard.batching import batching_stats  # noqa: E402
from ecoguard.guard.install import current_settings  # noqa: E402


@pytest.fixture
def guarded(tmp_path):
    yield
    ecoguard.uninstall()


def test_install_batching_coalesces_guarded_calls_and_meters_each_caller(guarded, tiny_llama_dir):
    import transformers

    calls = make_prompts(6, seed=5)
    ecoguard.install(
        mode="warn",
        rules="batch-size-one:off,small-model-quant:off",
        batching=True,
        max_batch_size=rows_of(calls),
        max_wait_ms=30_000,  # every caller arrives: the batch fills before the wait ends
        backend="simulated",
        ledger_path="off",
    )
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tiny_llama_dir, dtype=torch.float32
    ).eval()
    records = []
    lock = threading.Lock()

    def keep(record):
        with lock:
            records.append(record)

    unsubscribe = events.records.subscribe(keep)
    try:
        got = run_concurrently(
            lambda i: model.generate(**calls[i], max_new_tokens=5, do_sample=False), len(calls)
        )
    finally:
        unsubscribe()
    stats = batching_stats()
    assert stats["batches_total"] == 1 and stats["requests_coalesced"] == len(calls)
    assert stats["batch_size_histogram"] == {len(calls): 1}  # callers per batch
    assert stats["rows_histogram"] == {rows_of(calls): 1}

    ecoguard.uninstall()  # the lone reference calls below run unguarded, unbatched
    for call, mine in zip(calls, got, strict=True):
        alone = model.generate(**call, max_new_tokens=5, do_sample=False)
        assert torch.equal(mine, alone)

    # one record per caller, each with its own requests; the batch's energy is shared by them
    assert len(records) == len(calls)
    assert sorted(r.requests for r in records) == sorted(c["input_ids"].shape[0] for c in calls)
    assert all(r.tier == "simulated" and r.energy_j > 0 for r in records)
    # each record carries the batch the GPU ran, not the caller's own rows
    assert {r.batch_size for r in records} == {rows_of(calls)}


def test_coalesced_calls_do_not_count_as_batch_size_one_but_lone_calls_still_do(
    guarded, tiny_llama_dir
):
    import transformers

    ecoguard.install(
        mode="warn",
        rules="small-model-quant:off",
        batching=True,
        max_batch_size=8,
        max_wait_ms=30_000,
        backend="simulated",
        ledger_path="off",
    )
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tiny_llama_dir, dtype=torch.float32
    ).eval()
    fired = []
    unsubscribe = events.findings.subscribe(
        lambda event: (
            fired.append(event.finding.rule) if event.finding.rule == "batch-size-one" else None
        )
    )
    try:
        one_row = [{"input_ids": torch.tensor([[3, 4, 5 + i]])} for i in range(8)]
        for _ in range(2):  # 16 one-row calls, each coalesced into a batch of 8
            run_concurrently(
                lambda i: model.generate(**one_row[i], max_new_tokens=2, do_sample=False), 8
            )
        assert fired == []
        # Same settings, batching still on; lone callers need not wait for partners.
        current = current_settings()
        ecoguard.install(settings=current, max_wait_ms=0)
        assert current_settings().batching and current_settings().max_wait_ms == 0
        with pytest.warns(ecoguard.EnergyTrapWarning, match="nothing to coalesce"):
            for i in range(8):  # now one at a time: nothing to coalesce with
                model.generate(**one_row[i], max_new_tokens=2, do_sample=False)
        assert fired == ["batch-size-one"]
    finally:
        unsubscribe()
