"""Knowledge: build reproducibility, look-ups, the estimator ladder and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from knowledge_support import build_script, deployment

from ecoguard.cli import main
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec, normalize_precision
from ecoguard.errors import UnknownGpuError, UnknownModelError, UsageError
from ecoguard.knowledge import (
    crossover,
    equivalents,
    find_rows,
    gpu_profiles,
    reference_rows,
    region,
    resolve_gpu,
    resolve_model,
)
from ecoguard.knowledge.estimator import batch_power_law, estimate

REPO = Path(__file__).resolve().parents[2]


def test_build_script_reproduces_data(tmp_path, monkeypatch):
    """The vendored upstream files (data/upstream/, in every clone) rebuild data/ byte for byte."""
    monkeypatch.delenv("ECOGUARD_REFERENCE_DATA", raising=False)
    module = build_script()
    assert module.default_source() == REPO / "data" / "upstream"
    module.build(module.default_source(), tmp_path)
    for name in ("reference_rows.json", "README.md"):
        assert (tmp_path / name).read_bytes() == (REPO / "data" / name).read_bytes(), name


def test_rows_have_tiers_sources_and_exclude_formula_dataset():
    rows = reference_rows()
    assert len(rows) > 200
    assert {r.tier for r in rows} <= {"measured", "reported", "local"}
    assert all(r.source and r.id for r in rows)
    assert len({r.id for r in rows}) == len(rows)
    assert not any("ecocompute_benchmark_dataset" in r.source for r in rows)
    profiles = gpu_profiles()
    assert all(r.gpu in profiles for r in rows)


def test_acceptance_a800_batch_sweep_measured():
    """BS 1 -> 64 is read within the one session that measured both (the A800 sweep)."""
    bs1 = estimate(
        deployment("mistralai/Mistral-7B-Instruct-v0.2", "a800", "int8_pure", 1, 256, 256)
    )
    bs64 = estimate(deployment("mistral-7b", "a800", "int8_pure", 64, 256, 256))
    assert bs1.tier == bs64.tier == "measured"
    # Measured means measured: BS 64 is its one measurement (the study's headline figure).
    assert round(bs64.energy_per_request_j, 2) == 75.89
    # The change is the paired one, and the figures a comparison reads follow it.
    paired = bs64.paired_energy_per_request_j / bs1.paired_energy_per_request_j - 1
    assert round(paired * 100, 1) == -95.7
    assert "batch size 1 -> 64 -95.7% paired (median of 1 same-session pair" in bs64.method
    assert [c[:2] for c in bs64.paired_changes][-1] == (
        "batch size 1 -> 64",
        pytest.approx(-95.7, abs=0.05),
    )
    # Its own figures differ a little (BS 1 is the median of three sessions): both are said.
    own = (bs64.energy_per_request_j / bs1.energy_per_request_j - 1) * 100
    assert round(own, 1) == -95.5
    assert "-95.5% between the two configurations' own figures" in bs64.method
    assert any("batch_size_raw" in s for s in bs64.sources)
    # BS 1 is the median of its own three sessions, the paired change vs FP16 beside it.
    assert "median of 3 measured sessions" in bs1.method
    assert "FP16 -> int8_pure +40.8% paired (median of 2 same-session pairs" in bs1.method


def test_acceptance_rtx5090_qwen2_7b_nf4_delta_measured():
    nf4 = estimate(deployment("Qwen/Qwen2-7B", "rtx5090", "nf4", 1, 512, 128))
    fp16 = estimate(deployment("Qwen/Qwen2-7B", "rtx5090", "fp16", 1, 512, 128))
    assert nf4.tier == fp16.tier == "measured"
    delta = (nf4.paired_energy_per_1k_tokens_j / fp16.paired_energy_per_1k_tokens_j - 1) * 100
    assert round(delta, 1) == -31.5  # the median of the four same-session pairs
    # The two medians of their own sessions differ slightly; the answer says both.
    own = (nf4.energy_per_1k_tokens_j / fp16.energy_per_1k_tokens_j - 1) * 100
    assert round(own, 1) == -31.7
    assert "FP16 -> nf4 -31.5% paired" in nf4.method and "-31.7% between" in nf4.method
    deltas = sorted(round(d, 1) for _, _, d, _ in nf4.paired_deltas)
    assert deltas == [-32.3, -31.7, -31.4, -11.4]
    assert "rtx5090/qwen2-7b/nf4/bs1/ecai-5090csv" in nf4.rows


def test_multiple_measured_rows_are_combined_and_said_so():
    result = estimate(deployment("qwen2-7b", "rtx5090", "fp16"))
    assert result.tier == "measured"
    assert "median of 7 measured sessions" in result.method and len(result.rows) > 1
    low, high = result.energy_per_1k_tokens_j_range
    assert low < result.energy_per_1k_tokens_j < high


def test_interpolation_batch_scaling_and_extrapolation_are_labelled():
    interp = estimate(deployment("Qwen/Qwen2.5-7B", "a800", "fp16"))
    assert interp.tier == "derived" and "over model size" in interp.method
    scaled = estimate(deployment("yi-1.5-9b", "a800", "fp16", bs=8))
    assert scaled.tier == "derived" and scaled.family == "batch"
    assert "BS 1 -> 8" in scaled.method
    assert (
        scaled.energy_per_1k_tokens_j
        < estimate(deployment("yi-1.5-9b", "a800", "fp16")).energy_per_1k_tokens_j
    )
    carried = estimate(deployment("llama-3.1-8b", "h100_sxm", "fp16"))
    assert carried.tier == "extrapolated" and carried.family == "cross-gpu"
    assert "TDP" in carried.method and "fitted" in carried.method
    assert carried.carried_from and "h100_sxm" not in carried.carried_from
    assert all(g in carried.method for g in carried.carried_from)
    alpha = batch_power_law()[1]
    assert 0.5 < alpha < 1.2


def test_tier_none_when_nothing_supports_it():
    result = estimate(Deployment(gpu=GpuSpec(profile="a800")))
    assert result.tier == "none" and result.energy_per_request_j is None
    fp8_on_volta = estimate(deployment("qwen2.5-3b", "v100", "fp8_dynamic"))
    assert fp8_on_volta.tier == "none" and "FP8" in fp8_on_volta.method


def test_monthly_uses_region_and_settings_overrides():
    from ecoguard.config import Settings

    dep = deployment("mistral-7b", "a800", "int8_pure", 64, 256, 256)
    us = estimate(dep, requests_per_month=1_000_000)
    expected_kwh = us.energy_per_request_j * 1_000_000 * 1.1 / 3.6e6
    assert us.monthly.energy_kwh == pytest.approx(expected_kwh)
    assert us.monthly.cost_usd == pytest.approx(expected_kwh * 0.12)
    cn = estimate(dep, settings=Settings(region="china", pue=1.0), requests_per_month=1000)
    assert cn.monthly.co2_kg == pytest.approx(cn.energy_per_request_j * 1000 / 3.6e6 * 555 / 1000)


def test_invalid_values_raise_usage_error():
    with pytest.raises(UsageError):
        estimate(deployment("7B", "a800", "fp16", bs=0))
    with pytest.raises(UsageError):
        estimate(deployment("7B", "a800", "fp16"), requests_per_month=-1)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("int8_default", "int8_mixed"),
        ("int8", "int8_mixed"),
        ("load_in_8bit", "int8_mixed"),
        ("4bit", "nf4"),
        ("fp8", "fp8_weight_only"),
        ("half", "fp16"),
        ("pure_int8", "int8_pure"),
    ],
)
def test_precision_aliases(text, canonical):
    assert normalize_precision(text) == canonical
    assert all(r.precision == canonical for r in find_rows(precision=text))


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "h100_sxm"),
        ("5090", "rtx5090"),
        ("4090D", "rtx4090d"),
        ("H100", "h100_sxm"),
        ("NVIDIA A800-SXM4-80GB", "a800"),
        ("Tesla T4", "tesla_t4"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx_pro_6000"),
        ("a100_40gb", "a100_40gb"),
    ],
)
def test_resolve_gpu(name, key):
    assert resolve_gpu(name).key == key


def test_unknown_gpu_suggests_nearest():
    with pytest.raises(UnknownGpuError) as info:
        resolve_gpu("rtx 5080")
    assert "rtx5090" in info.value.suggestions


def test_resolve_model_ids_and_sizes():
    assert resolve_model("Qwen/Qwen2.5-7B-Instruct").id == "qwen2.5-7b"
    assert resolve_model("mistralai/Mistral-7B-Instruct-v0.2").id == "mistral-7b"
    assert resolve_model("7B").params_b == 7.0
    assert resolve_model("1.5b").params_b == 1.5
    assert resolve_model("acme/custom-13b-chat").params_b == 13.0
    with pytest.raises(UnknownModelError):
        resolve_model("mystery-model")


def test_required_gpu_profiles_present():
    required = {
        "rtx5090",
        "rtx4090d",
        "rtx4090",
        "a800",
        "a100_40gb",
        "a100_80gb",
        "h100_pcie",
        "h100_sxm",
        "h200",
        "rtx3090",
        "v100",
        "tesla_t4",
        "l4",
        "l40s",
        "rtx_pro_6000",
    }
    profiles = gpu_profiles()
    assert required <= set(profiles)
    assert profiles["rtx5090"].idle_w == 45.2 and profiles["tesla_t4"].idle_w == 12.8
    assert profiles["rtx_pro_6000"].idle_w == 34.431
    assert all(p.source for p in profiles.values())


def test_regions_and_equivalents():
    assert region("us").price_usd_per_kwh == 0.12 and region("us").gco2_per_kwh == 390
    assert region("cn").key == "china" and region("china").gco2_per_kwh == 555
    for key in ("eu", "uk", "fr", "de", "in", "jp", "ca"):
        assert region(key).source
    with pytest.raises(UsageError):
        region("mars")
    eq = {e.key: e for e in equivalents(1.0, 0.2485)}
    assert eq["car_km"].value == pytest.approx(1.0)
    assert eq["phone_charges"].value == pytest.approx(1 / 0.019)


def test_crossover_fit_and_reported():
    blackwell = crossover("blackwell", "nf4")
    assert blackwell.reported_b == 5.2 and blackwell.points >= 4
    assert blackwell.fitted_b is not None and "ln(params)" in blackwell.method
    assert crossover("turing", "4bit").reported_b == 3.4
    assert crossover("ada", "nf4").reported_b == 4.2


def test_import_is_light():
    code = (
        "import sys, time; t=time.perf_counter(); import ecoguard.knowledge as k; "
        "dt=time.perf_counter()-t; "
        "bad=[m for m in ('torch','transformers','pynvml','prometheus_client') if m in sys.modules]; "
        "t=time.perf_counter(); k.reference_rows(); k.gpu_profiles(); k.model_registry(); "
        "k.regions(); load=time.perf_counter()-t; print(dt, load, bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    _import_s, load_s, bad = out.stdout.split(maxsplit=2)
    assert bad.strip() == "[]"
    assert float(load_s) < 0.5  # 50 ms target; generous bound for a loaded CI box


def test_cli_data_json_counts(capsys):
    assert main(["data", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["total"] == len(reference_rows())
    assert sum(c["rows"] for c in payload["counts"]) == payload["total"]
    assert payload["by_tier"]["measured"] > payload["by_tier"]["reported"]


def test_cli_data_rows_filtered(capsys):
    assert (
        main(
            [
                "data",
                "--rows",
                "--json",
                "--gpu",
                "A800",
                "--precision",
                "pure_int8",
                "--tier",
                "measured",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["gpu"] == "a800" and r["precision"] == "int8_pure" for r in rows)


def test_cli_estimate_json(capsys):
    code = main(
        [
            "estimate",
            "--model",
            "mistral-7b",
            "--gpu",
            "a800",
            "--precision",
            "pure_int8",
            "--batch-size",
            "64",
            "--prompt-tokens",
            "256",
            "--generation-tokens",
            "256",
            "--requests-per-month",
            "1000",
            "--region",
            "cn",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tier"] == "measured"
    assert out["energy_per_request_j"] == pytest.approx(out["energy_per_1k_tokens_j"] * 0.256, 1e-3)
    low, high = out["energy_per_request_j_range"]
    assert low <= out["energy_per_request_j"] <= high
    assert len(out["monthly"]["cost_usd_range"]) == 2
    assert set(out["monthly"]) >= {"requests", "energy_kwh", "cost_usd", "co2_kg"}
    assert isinstance(out["sources"], list) and out["sources"]


@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "--model", "7B", "--gpu", "rtx5080"],
        ["estimate", "--model", "7B", "--gpu", "a800", "--batch-size", "0"],
        ["estimate", "--model", "7B", "--gpu", "a800", "--generation-tokens", "-5"],
        ["estimate", "--model", "7B", "--gpu", "a800", "--precision", "int3"],
        ["estimate", "--model", "mystery", "--gpu", "a800"],
        ["estimate", "--gpu", "a800"],
        ["estimate", "--model", "7B", "--gpu", "a800", "--region", "mars"],
        ["data", "--gpu", "nope"],
    ],
)
def test_cli_bad_input_exits_2(argv, capsys):
    assert main(argv) == 2
    assert "error" in capsys.readouterr().err


def test_cli_params_b_accepted(capsys):
    assert (
        main(["estimate", "--params-b", "7", "--gpu", "4090D", "--precision", "int8_default"]) == 0
    )
    assert "tier:" in capsys.readouterr().out


def test_size_extrapolation_is_bounded_to_twice_the_measured_range():
    """A power law between 7 B and 9 B must not be carried down to a 0.1 M-parameter model."""
    from ecoguard.knowledge.estimator import estimate

    far = estimate(
        Deployment(
            model=ModelSpec(params_b=0.0001),
            gpu=GpuSpec(profile="a800"),
            precision="nf4_dq",
            batch_size=1,
        )
    )
    assert far.tier == "none" and far.energy_per_1k_tokens_j is None
    near = estimate(
        Deployment(
            model=ModelSpec(params_b=16.0),
            gpu=GpuSpec(profile="a800"),
            precision="nf4",
            batch_size=1,
        )
    )
    assert near.tier == "derived" and "extrapolation" in near.method
    assert near.energy_per_1k_tokens_j > 7544.6  # above the measured 14 B row


@pytest.mark.parametrize(
    ("params_b", "precision", "says"),
    [
        (70.0, "fp16", "B measured for fp16; ecoguard does not extrapolate that far"),
        (7.0, "fp32", "the reference data has no fp32 rows"),
    ],
)
def test_no_estimate_says_why(params_b, precision, says):
    from ecoguard.knowledge.estimator import estimate

    result = estimate(
        Deployment(
            model=ModelSpec(params_b=params_b),
            gpu=GpuSpec(profile="tesla_t4"),
            precision=precision,
            batch_size=1,
        )
    )
    assert result.tier == "none" and says in result.method


def test_precision_delta_is_not_borrowed_from_far_outside_the_measured_sizes():
    """The FP16 -> NF4 change measured on 0.5-7B models must not be applied to a 30B model."""
    from ecoguard.knowledge.evidence import Evidence
    from ecoguard.knowledge.ladder import Ladder

    ladder = Ladder(Evidence(reference_rows()))
    assert ladder.precision_ratio("rtx5090", "nf4", 7.0, 1, None) is not None
    assert ladder.precision_ratio("rtx5090", "nf4", 30.0, 1, None) is None


def test_build_rows_and_loaded_rows_share_one_schema():
    """The build script writes rows the package reads back, ignoring unknown keys: a field
    added on one side only would vanish silently, so both must list the same fields."""
    import dataclasses

    from ecoguard.knowledge.records import ReferenceRow

    built = {f.name for f in dataclasses.fields(build_script().Row)}
    assert built == {f.name for f in dataclasses.fields(ReferenceRow)}
