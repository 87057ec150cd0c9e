"""``ecoguard demo``: end to end in a subprocess (the README command), modes in-process.

The quick demo runs the real guard, meter (simulated GPU), metrics server, ledger and report on a
tiny model built from a config; the tests check what it claims against what it wrote: the
ledger's rows, the scraped /metrics and the guard's alerts. The full SmolLM2 path takes about a
minute, so it runs only on request (``-m slow`` or RUN_FULL_DEMO=1) and only where the
converted checkpoint is already cached.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys

import pytest

pytest.importorskip("transformers")
pytest.importorskip("bitsandbytes")

from ecoguard.cli import main
from ecoguard.rules import BS1_SUSTAINED_CALLS


def _ledger_rows(path):
    conn = sqlite3.connect(path)
    try:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM generations ORDER BY id")]
    finally:
        conn.close()


def _rules(summary, action=None):
    return {a["rule"] for a in summary["alerts"] if action is None or a["action"] == action}


@pytest.fixture(scope="module")
def quick_json(tmp_path_factory):
    """One ``ecoguard demo --quick --json`` in a fresh interpreter, as a user would run it."""
    tmp = tmp_path_factory.mktemp("demo")
    ledger = tmp / "ledger.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    env.update(XDG_CACHE_HOME=str(tmp / "cache"), XDG_DATA_HOME=str(tmp / "data"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ecoguard",
            "demo",
            "--quick",
            "--json",
            "--backend",
            "simulated",
            "--metrics-port",
            "0",
            "--ledger",
            str(ledger),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr, ledger


def test_quick_demo_fires_both_alerts(quick_json):
    summary, progress, _ = quick_json
    assert {"int8-mixed", "batch-size-one"} <= _rules(summary)
    assert summary["mode"] == "warn"
    assert summary["int8"]["fixed"] is False and summary["int8"]["threshold_loaded"] == 6.0
    # Progress went to stderr while stdout stayed pure JSON; the lobster alerts are in it.
    assert "[1/6]" in progress and "[6/6] Report" in progress
    assert "INT8 mixed-precision trap (int8-mixed)" in progress
    assert "Batch-size-one serving (batch-size-one)" in progress


def test_quick_demo_is_labelled_simulated(quick_json):
    summary, progress, ledger = quick_json
    assert summary["gpu"]["tier"] == "simulated"
    assert "SIMULATED" in progress
    assert {row["tier"] for row in _ledger_rows(ledger)} == {"simulated"}
    assert summary["measured_vs_reference"]["tier"] == "simulated"


def test_quick_demo_report_agrees_with_ledger(quick_json):
    summary, _, ledger = quick_json
    rows = _ledger_rows(ledger)
    phases = summary["phases"]
    calls = phases["batch_size_one"]["calls"] + phases["batched"]["calls"]
    assert calls == BS1_SUSTAINED_CALLS + 1
    assert len(rows) == calls == summary["ledger"]["records"]
    total = summary["ledger"]["total"]
    assert total["tokens"] == sum(r["tokens"] for r in rows) > 0
    assert total["energy_j"] == pytest.approx(sum(r["energy_j"] for r in rows), rel=1e-9)
    assert total["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in rows), rel=1e-9)
    # The per-phase figures (from the published records) add up to the ledger's totals.
    assert phases["batch_size_one"]["tokens"] + phases["batched"]["tokens"] == total["tokens"]
    assert phases["batch_size_one"]["energy_j"] + phases["batched"]["energy_j"] == pytest.approx(
        total["energy_j"], rel=1e-9
    )
    batch_sizes = sorted(r["batch_size"] for r in rows)
    assert batch_sizes == [1] * BS1_SUSTAINED_CALLS + [8]
    ref = summary["measured_vs_reference"]
    assert ref["reference_j_per_token"] == pytest.approx(total["reference_j_per_token"])


def test_quick_demo_served_metrics_matching_ledger(quick_json):
    summary, _, ledger = quick_json
    assert summary["metrics_url"].startswith("http://127.0.0.1:")
    metrics = summary["metrics"]
    assert metrics["ok"] is True
    rows = _ledger_rows(ledger)
    assert metrics["totals"]["ecoguard_generation_tokens_total"] == sum(r["tokens"] for r in rows)
    assert {"int8-mixed", "batch-size-one"} <= set(metrics["findings"])


def test_quick_demo_savings_add_up(quick_json):
    summary, _, _ = quick_json
    savings = summary["savings"]
    assert {i["rule"] for i in savings["items"]} == {"int8-mixed", "batch-size-one"}
    applied = {i["rule"]: i["applied"] for i in savings["items"]}
    assert applied == {"int8-mixed": False, "batch-size-one": True}  # warn mode: int8 left
    # A tiny model is outside the reference data: the figures are for the nearest measured
    # model on the same (simulated) GPU, and the summary says so.
    assert savings["served_model"] == "tiny-llama"
    assert savings["model"] in savings["basis"] and savings["before"]["tier"] != "none"
    before, after = savings["before"]["monthly_usd"], savings["after"]["monthly_usd"]
    chained = savings["saved"]["cost_usd"] + savings["available"]["cost_usd"]
    assert chained == pytest.approx(before - after, rel=1e-9)
    assert savings["saved"]["cost_usd"] > 0 and savings["available"]["cost_usd"] > 0
    assert savings["monthly_requests"] == 1_000_000
    assert savings["generation_tokens"] == 8
    verdict = summary["verdict"]
    assert "int8-mixed" in verdict["open"] and "batch-size-one" in verdict["fixed"]
    assert verdict["text"].startswith(f"[{verdict['mood'].upper()}] EcoLobster")


def _run_in_process(tmp_path, mode):
    from ecoguard.demo import run_demo

    out = io.StringIO()
    summary = run_demo(
        quick=True,
        mode=mode,
        metrics_port=0,
        backend="simulated",
        ledger=str(tmp_path / f"{mode}.sqlite"),
        stream=out,
    )
    return summary, out.getvalue()


def test_fix_mode_shows_the_threshold_change(tmp_path):
    from ecoguard import is_installed

    summary, text = _run_in_process(tmp_path, "fix")
    int8 = summary["int8"]
    assert int8["threshold_requested"] == 6.0 and int8["threshold_loaded"] == 0.0
    assert int8["linear8bit_layers"] > 0 and int8["layers_at_zero"] == int8["linear8bit_layers"]
    assert "guard" in int8["fixed_by"]
    assert "llm_int8_threshold=6 -> 0.0" in int8["changed"]
    assert "int8-mixed" in _rules(summary, action="fix")
    assert "int8 threshold: 6 -> 0 (" in text
    assert "changed: loaded with a copy of quantization_config" in text
    assert {i["rule"] for i in summary["savings"]["items"] if i["applied"]} == {
        "int8-mixed",
        "batch-size-one",
    }
    assert summary["verdict"]["fixed"] == ["batch-size-one", "int8-mixed"]
    assert not is_installed()  # the demo leaves the process as it found it


def test_strict_mode_refuses_then_runs_the_fixed_config(tmp_path):
    summary, text = _run_in_process(tmp_path, "strict")
    assert {"int8-mixed", "batch-size-one"} <= _rules(summary, action="strict")
    assert summary["int8"]["fixed"] is True and "strict" in summary["int8"]["fixed_by"]
    bs1 = summary["phases"]["batch_size_one"]
    # The call that would make the streak sustained is refused before it runs.
    assert bs1["refused_by_strict"] is True and bs1["calls"] == BS1_SUSTAINED_CALLS - 1
    assert summary["phases"]["batched"]["calls"] == 1
    assert "strict mode refused the load" in text
    assert summary["ledger"]["records"] == BS1_SUSTAINED_CALLS


def test_ledger_off_reports_from_memory(tmp_path):
    from ecoguard.demo import run_demo

    summary = run_demo(
        quick=True,
        mode="warn",
        metrics_port=None,
        backend="simulated",
        ledger="off",
        stream=io.StringIO(),
    )
    assert summary["ledger"]["path"] is None
    assert summary["ledger"]["records"] == BS1_SUSTAINED_CALLS + 1
    assert summary["metrics_url"] is None
    assert not (tmp_path / "xdg").exists()  # nothing written to the default ledger either


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["demo", "--mode", "loud"], "invalid choice"),
        (["demo", "--metrics-port", "70000"], "--metrics-port must be 0 to 65535"),
        (["demo", "--backend", "rapl"], "invalid choice"),
        (["demo", "--monthly-requests", "-1"], "--monthly-requests must be >= 0"),
    ],
)
def test_bad_flags_are_usage_errors(argv, needle, capsys):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_unknown_region_is_a_usage_error(capsys):
    assert main(["demo", "--quick", "--backend", "simulated", "--region", "mars"]) == 2
    assert "mars" in capsys.readouterr().err


def test_demo_module_import_is_light():
    code = (
        "import sys, ecoguard.demo; "
        "heavy = [m for m in ('torch', 'transformers', 'prometheus_client', 'pynvml') "
        "if m in sys.modules]; print(heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _full_demo_requested(config) -> bool:
    return "slow" in (config.getoption("-m") or "") or os.environ.get("RUN_FULL_DEMO") == "1"


@pytest.mark.slow
def test_full_demo_with_smollm2(tmp_path, request):
    from ecoguard import demo_model

    if not _full_demo_requested(request.config):
        pytest.skip("about a minute: opt in with -m slow or RUN_FULL_DEMO=1")
    if not demo_model.is_cached():
        pytest.skip(
            f"SmolLM2 not converted yet at {demo_model.cached_model_dir()}: run `ecoguard demo` once"
        )
    from ecoguard.demo import run_demo

    out = io.StringIO()
    summary = run_demo(
        mode="fix",
        metrics_port=0,
        backend="simulated",
        ledger=str(tmp_path / "l.sqlite"),
        stream=out,
    )
    assert summary["model"]["kind"] == "smollm2"
    assert summary["int8"]["fixed"] is True
    assert {"int8-mixed", "batch-size-one", "small-model-quant"} <= _rules(summary)
    answer = summary["phases"]["batch_size_one"]["sample_answer"]
    assert answer and "Paris" in answer  # a real model answered a real question
    assert summary["savings"]["saved"]["cost_usd"] > 0
    assert summary["savings"]["generation_tokens"] == 24
