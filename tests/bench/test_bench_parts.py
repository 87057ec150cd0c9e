"""The bench's pure parts, the local dataset loader in ecoguard.knowledge, guard hand-off, progress."""

from __future__ import annotations

import io
import json
import os
import statistics

import pytest

from ecoguard.bench.plan import BenchPlan, parse_precisions, parse_sizes
from ecoguard.bench.stats import RunSample, Stat, summarize
from ecoguard.errors import UsageError
from ecoguard.knowledge import find_rows, reference_rows, resolve_model
from ecoguard.knowledge.records import ReferenceRow
from ecoguard.knowledge.tables import local_data_path


def _row(**changes) -> dict:
    base = ReferenceRow(
        id="local/s1/a800/my-finetune/fp16/bs1",
        gpu="a800",
        model_id="acme/my-finetune",
        params_b=0.5,
        precision="fp16",
        batch_size=1,
        prompt_tokens=8,
        generation_tokens=4,
        throughput_tok_s=10.0,
        throughput_std=1.0,
        power_w=100.0,
        power_std=1.0,
        energy_j_per_1k=1234.0,
        energy_j_per_1k_std=10.0,
        energy_j_per_request=4.9,
        n_runs=2,
        cv_pct=0.8,
        perplexity=None,
        software="torch",
        date="2026-01-01",
        tier="local",
        source="ecoguard bench (local dataset)",
        note="",
    ).to_dict()
    base.update(changes)
    return base


def test_precision_and_size_parsing():
    assert parse_precisions("fp16, 4bit,int8_pure,fp16") == ("fp16", "nf4", "int8_pure")
    assert parse_sizes("1,8, 32,8") == (1, 8, 32)
    with pytest.raises(UsageError, match="accepted: fp32"):
        parse_precisions("fp16,int3")
    with pytest.raises(UsageError, match="integers"):
        parse_sizes("1,eight")
    with pytest.raises(UsageError, match="empty"):
        parse_sizes(" , ")
    plan = BenchPlan(model="m", precisions=("nf4", "fp16"), batch_sizes=(1, 8))
    assert plan.cells == [("fp16", 1), ("fp16", 8), ("nf4", 1), ("nf4", 8)]
    with pytest.raises(UsageError, match="two runs"):
        BenchPlan(model="m", precisions=("fp16",), batch_sizes=(1,), runs=1)


def test_statistics_and_cv_flag():
    stat = Stat.of([10.0, 12.0, 14.0])
    assert stat.mean == 12.0 and stat.std == pytest.approx(2.0) and stat.n == 3
    assert stat.cv_pct == pytest.approx(2.0 / 12.0 * 100)
    steady = [RunSample(energy_j=100.0, duration_s=1.0, tokens=100, requests=1) for _ in range(3)]
    summary = summarize(steady, cv_bound_pct=5.0)
    assert summary.energy_j_per_1k.mean == pytest.approx(1000.0) and not summary.unstable
    drifting = [
        RunSample(energy_j=e, duration_s=1.0, tokens=100, requests=1) for e in (100, 110, 125)
    ]
    summary = summarize(drifting, cv_bound_pct=5.0)
    values = [1000.0, 1100.0, 1250.0]
    assert summary.energy_j_per_1k.std == pytest.approx(statistics.stdev(values))
    assert summary.unstable  # CV ~11 % > 5 %


def test_local_dataset_path_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert local_data_path() == tmp_path / "xdg" / "ecoguard" / "local_rows.jsonl"
    monkeypatch.setenv("ECOGUARD_LOCAL_DATA", str(tmp_path / "mine.jsonl"))
    assert local_data_path() == tmp_path / "mine.jsonl"


def test_knowledge_loads_local_file_lazily_and_tolerates_bad_lines(tmp_path, monkeypatch):
    path = tmp_path / "rows.jsonl"
    monkeypatch.setenv("ECOGUARD_LOCAL_DATA", str(path))
    shipped = len(reference_rows())
    assert not find_rows(tier="local")
    lines = [
        json.dumps(_row(bench={"runs": []})),  # extra keys are ignored
        json.dumps(_row(id="x/measured", tier="measured")),  # not local: skipped
        json.dumps(_row(energy_j_per_1k=999.0)),  # same id later: replaces the first
        '{"id": "torn',  # a crash mid-write
    ]
    path.write_text("\n".join(lines) + "\n")
    (row,) = find_rows(tier="local")
    assert row.energy_j_per_1k == 999.0 and len(reference_rows()) == shipped + 1
    # A model outside the registry, known only from the local rows, resolves with their size.
    info = resolve_model("acme/my-finetune")
    assert info.params_b == 0.5 and "local" in info.source
    assert [r.id for r in find_rows(model="acme/my-finetune", gpu="a800")] == [row.id]
    # The file is re-read when it changes (another bench session appended to it).
    with path.open("a") as handle:
        handle.write(json.dumps(_row(id="local/s2/a800/my-finetune/fp16/bs8", batch_size=8)) + "\n")
    os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 1))
    assert {r.batch_size for r in find_rows(tier="local")} == {1, 8}


def test_import_knowledge_stays_light():
    import subprocess
    import sys

    code = (
        "import sys, ecoguard.knowledge, ecoguard.bench, ecoguard.bench.cli;"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_guard_rules_are_off_during_the_bench_and_restored():
    pytest.importorskip("ecoguard.guard.install")
    from ecoguard.bench.runner import guard_rules_off
    from ecoguard.findings import RULE_IDS
    from ecoguard.guard.install import current_settings, install, is_installed, uninstall

    assert not is_installed()
    with guard_rules_off():  # nothing installed: nothing to do
        assert not is_installed()
    install(mode="strict", rules={"int8-mixed": "fix"}, measure=False)
    try:
        before = current_settings()
        with guard_rules_off():
            during = current_settings()
            assert all(during.action_for(rule) == "off" for rule in RULE_IDS)
        assert current_settings() == before
        assert current_settings().action_for("int8-mixed") == "fix"
    finally:
        uninstall()


def test_progress_bar_on_tty_and_plain_lines_otherwise():
    from ecoguard.bench.progress import StderrProgress
    from ecoguard.bench.runner import CellResult

    now = [0.0]
    stream = io.StringIO()
    bar = StderrProgress(stream, tty=True, clock=lambda: now[0])
    bar.start(10)
    cell = CellResult("fp16", 1)
    bar.cell(cell, 1, 2)
    for _ in range(4):
        now[0] += 2.0
        bar.call_done(cell, "run")
    assert bar.eta_s() == pytest.approx(12.0)  # 2 s per call x 6 calls left
    assert "\r[" in stream.getvalue() and "ETA 12s" in stream.getvalue()
    bar.skip_calls(5)
    assert bar.total == 5
    cell.status, cell.reason = "skipped", "out of memory"
    bar.cell_done(cell)
    bar.close()
    assert "bench: fp16 bs1: skipped (out of memory)" in stream.getvalue()

    plain = io.StringIO()
    lines = StderrProgress(plain, tty=False)
    lines.start(3)
    lines.cell(cell, 1, 1)
    lines.call_done(cell, "run")
    assert "\r" not in plain.getvalue()
    assert plain.getvalue().splitlines() == ["bench: cell 1/1 fp16 bs1 ..."]


def test_an_oserror_from_a_precisions_library_skips_that_cell_not_the_model(
    tiny_llama_dir, monkeypatch
):
    """transformers says OSError for a missing model, but a quantization library failing to
    load says it too: only the first makes every precision of the model unavailable."""
    import transformers

    from ecoguard.bench.loading import CellSkipped, ModelUnavailable, load_model

    def broken_library(*args, **kwargs):
        raise OSError("libbitsandbytes_cuda.so: cannot open shared object file")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", broken_library)
    with pytest.raises(CellSkipped, match="nf4 did not load"):
        load_model(str(tiny_llama_dir), "nf4", on_cuda=False)
    with pytest.raises(ModelUnavailable):
        load_model(str(tiny_llama_dir) + "-missing", "nf4", on_cuda=False)
