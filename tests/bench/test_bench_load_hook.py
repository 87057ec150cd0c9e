"""``run_bench(load_model=...)``: a caller prepares the model (e.g. torch.compile) before the cells."""

from __future__ import annotations

import pytest

from ecoguard.bench import BenchPlan, run_bench
from ecoguard.bench.loading import CellSkipped, load_model
from ecoguard.config import Settings


def test_run_bench_uses_the_given_loader_and_its_skips(tiny_llama_dir):
    pytest.importorskip("torch")
    calls: list[tuple[str, str, bool]] = []

    def loader(model_id: str, precision: str, *, on_cuda: bool):
        calls.append((model_id, precision, on_cuda))
        if precision == "fp32":
            raise CellSkipped("fp32 refused by the test loader")
        model = load_model(model_id, precision, on_cuda=on_cuda)
        model.prepared_by_test_loader = True
        return model

    plan = BenchPlan(
        model=str(tiny_llama_dir),
        precisions=("fp16", "fp32"),
        batch_sizes=(1,),
        prompt_tokens=4,
        generation_tokens=2,
        runs=2,
        warmup=0,
        idle_s=0.0,
        backend="simulated",
    )
    result = run_bench(plan, settings=Settings(ledger_path=None), load_model=loader)
    assert [(p, on_cuda) for _, p, on_cuda in calls] == [("fp16", False), ("fp32", False)]
    fp16, fp32 = result.cells
    assert fp16.status == "measured" and len(fp16.samples) == 2
    assert (fp32.status, fp32.reason) == ("skipped", "fp32 refused by the test loader")
