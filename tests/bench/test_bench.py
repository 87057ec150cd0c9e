"""``ecoguard bench`` end to end on the tiny model and the simulated backend (and the fake NVML)."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from ecoguard.bench import runner
from ecoguard.cli import main


def read_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


TEMPLATE = (
    Path(__file__).resolve().parents[3]
    / "shared/reference-data/ecocompute-ai/data/community_submission_template.csv"
)


def test_rows_land_in_local_dataset_with_the_runs_statistics(bench, local_file, tmp_path, capsys):
    out_csv = tmp_path / "submission.csv"
    code, doc = bench(
        "--precisions", "int8_pure,fp16", "--batch-sizes", "1,2", "--out", str(out_csv)
    )
    assert code == 0
    assert doc["simulated"] is True and "SIMULATED" in doc["notice"]
    assert doc["simulated_notice_end"] == doc["notice"]
    # fp16 is measured first so every other cell has its same-session baseline.
    assert [(c["precision"], c["batch_size"]) for c in doc["cells"]] == [
        ("fp16", 1), ("fp16", 2), ("int8_pure", 1), ("int8_pure", 2)
    ]  # fmt: skip
    lines = {line["id"]: line for line in read_lines(local_file)}
    assert len(lines) == 4
    for cell in doc["cells"]:
        assert cell["status"] == "measured", cell
        runs = cell["runs"]
        assert len(runs) == 2
        assert all(r["tokens"] == 4 * cell["batch_size"] for r in runs)
        energy = [r["energy_j"] / r["tokens"] * 1000 for r in runs]
        throughput = [r["tokens"] / r["duration_s"] for r in runs]
        power = [r["energy_j"] / r["duration_s"] for r in runs]
        row = lines[cell["row_id"]]
        assert row["tier"] == "local" and row["gpu"] == "a800" and row["n_runs"] == 2
        assert row["batch_size"] == cell["batch_size"]
        assert (row["prompt_tokens"], row["generation_tokens"]) == (8, 4)
        assert row["energy_j_per_1k"] == pytest.approx(statistics.fmean(energy))
        assert row["energy_j_per_1k_std"] == pytest.approx(statistics.stdev(energy))
        assert row["throughput_tok_s"] == pytest.approx(statistics.fmean(throughput))
        assert row["throughput_std"] == pytest.approx(statistics.stdev(throughput))
        assert row["power_w"] == pytest.approx(statistics.fmean(power))
        assert row["energy_j_per_request"] == pytest.approx(
            statistics.fmean(r["energy_j"] / cell["batch_size"] for r in runs)
        )
        assert row["cv_pct"] == pytest.approx(
            statistics.stdev(energy) / statistics.fmean(energy) * 100
        )
        assert row["params_b"] > 0 and "SIMULATED" in row["note"]
        assert row["bench"]["runs"] == runs  # the per-run values are kept for audit
        if cell["precision"] == "int8_pure":
            base = next(
                c for c in doc["cells"]
                if c["precision"] == "fp16" and c["batch_size"] == cell["batch_size"]
            )  # fmt: skip
            base_energy = lines[base["row_id"]]["energy_j_per_1k"]
            assert row["baseline_row"] == base["row_id"]
            assert row["delta_vs_fp16_pct"] == pytest.approx(
                (row["energy_j_per_1k"] - base_energy) / base_energy * 100
            )
        else:
            assert row["delta_vs_fp16_pct"] is None
    # The community CSV: the upstream template's columns, one line per measured cell.
    with out_csv.open(newline="") as handle:
        reader = csv.DictReader(handle)
        submitted = list(reader)
    assert len(submitted) == 4
    assert {r["track"] for r in submitted} == {"simulated-not-for-submission"}
    if TEMPLATE.is_file():
        with TEMPLATE.open(newline="") as handle:
            assert reader.fieldnames == next(csv.reader(handle))

    # `ecoguard data` counts them as tier local; `ecoguard estimate` prefers them.
    capsys.readouterr()
    assert main(["data", "--json", "--tier", "local"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["total"] == 4 and counts["by_tier"] == {"local": 4}
    assert main(["data", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["by_tier"]["local"] == 4
    model = doc["session"]["model_id"]
    args = ["estimate", "--model", model, "--gpu", "a800", "--precision", "int8_pure"]
    args += ["--batch-size", "2", "--prompt-tokens", "8", "--generation-tokens", "4", "--json"]
    assert main(args) == 0
    estimate = json.loads(capsys.readouterr().out)
    expected = next(
        r for r in lines.values() if r["precision"] == "int8_pure" and r["batch_size"] == 2
    )
    assert estimate["tier"] == "local"
    # One session: the paired chain (fp16 BS 1 x int8_pure/fp16 x BS 2/BS 1) lands on the row.
    assert expected["id"] in estimate["rows"]
    assert all(row_id in lines for row_id in estimate["rows"])
    assert estimate["energy_per_1k_tokens_j"] == pytest.approx(
        expected["energy_j_per_1k"], abs=1e-3
    )


def test_injected_oom_skips_only_that_cell_and_text_says_simulated(bench, local_file, monkeypatch):
    import torch

    real = runner.generate_once

    def oom_at_two(model, input_ids, generation_tokens):
        if input_ids.shape[0] == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model, input_ids, generation_tokens)

    monkeypatch.setattr(runner, "generate_once", oom_at_two)
    code, text = bench("--precisions", "fp16", "--batch-sizes", "1,2,3", json_out=False)
    assert code == 0
    lines = [line for line in text.splitlines() if line.strip()]
    assert "SIMULATED" in lines[0] and "SIMULATED" in lines[-1]
    skipped = [line for line in lines if line.startswith("fp16") and "skipped" in line]
    assert len(skipped) == 1 and "out of memory at batch size 2" in skipped[0]
    rows = read_lines(local_file)
    assert sorted(r["batch_size"] for r in rows) == [1, 3]


def test_interrupt_keeps_finished_cells(bench, local_file, monkeypatch):
    real = runner.generate_once
    calls = {"n": 0}

    def interrupt_in_second_cell(model, input_ids, generation_tokens):
        calls["n"] += 1
        if calls["n"] > 3:  # one cell is 1 warm-up + 2 runs
            raise KeyboardInterrupt
        return real(model, input_ids, generation_tokens)

    monkeypatch.setattr(runner, "generate_once", interrupt_in_second_cell)
    code, doc = bench("--precisions", "fp16,int8_pure", "--batch-sizes", "1,2")
    assert code == 130
    assert doc["interrupted"] is True
    assert [c["status"] for c in doc["cells"]] == ["measured", "interrupted"]
    rows = read_lines(local_file)
    assert [(r["precision"], r["batch_size"]) for r in rows] == [("fp16", 1)]


def test_model_that_does_not_load_is_skipped_with_reason(bench, local_file, tmp_path):
    missing = tmp_path / "no-such-model"
    code, doc = bench("--precisions", "fp16,nf4", "--batch-sizes", "1,2", model=str(missing))
    assert code == 1  # nothing measured
    assert len(doc["cells"]) == 4
    for cell in doc["cells"]:
        assert cell["status"] == "skipped" and "the model did not load" in cell["reason"]
    assert not local_file.exists()


def test_no_save_writes_nothing(bench, local_file):
    code, doc = bench("--precisions", "fp16", "--batch-sizes", "1", "--no-save")
    assert code == 0 and doc["dataset"] is None
    assert doc["cells"][0]["status"] == "measured"
    assert not local_file.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--precisions", "fp16,fp4"], "accepted: fp32, fp16"),
        (["--batch-sizes", "0"], "--batch-sizes must be an integer from 1"),
        (["--batch-sizes", "1,x"], "--batch-sizes must be integers"),
        (["--runs", "1"], "a standard deviation needs two runs"),
        (["--generation-tokens", "0"], "--generation-tokens must be"),
        (["--cooldown-s", "-1"], "--cooldown-s must be 0 to 3600"),
        (["--backend", "null"], "invalid choice"),
        (["--simulated-gpu", "voodoo5"], "unknown GPU"),
    ],
)
def test_bad_input_exits_2_with_what_is_accepted(args, says, capsys, local_file):
    code = main(["bench", "--model", "whatever", *args])
    assert code == 2
    assert says in capsys.readouterr().err
    assert not local_file.exists()


def test_fake_nvml_backend_measures_the_driver(bench, local_file, tmp_path, monkeypatch):
    """With a (fake) NVIDIA driver, auto picks NVML: live figures, profile from the NVML name."""
    from ecoguard.testing.fake_nvml import (
        FakeNvmlConfig,
        build_library,
        gcc_available,
        load_in_process,
    )

    if not gcc_available():
        pytest.skip("gcc is not installed: cannot build the fake NVML library")
    load_in_process(build_library(tmp_path / "fake-nvml"))
    config = FakeNvmlConfig(gpus=1, name="NVIDIA GeForce RTX 4090", update_s=0.005)
    for key, value in config.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # The fixture passes --backend simulated; the later --backend auto wins.
    code, doc = bench("--precisions", "fp16", "--batch-sizes", "1", "--backend", "auto")
    assert code == 0
    assert doc["simulated"] is False and doc["notice"] is None
    assert doc["session"]["backend"] == "nvml" and doc["session"]["tier"] == "live"
    (row,) = read_lines(local_file)
    assert row["gpu"] == "rtx4090" and "SIMULATED" not in row["note"]
    assert row["energy_j_per_1k"] > 0
