"""Each rule's table of cases: pure Deployment records in, findings out (no transformers)."""

from __future__ import annotations

import pytest

from ecoguard.config import Settings
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec, QuantSpec, SoftwareVersions
from ecoguard.errors import UsageError
from ecoguard.findings import RULE_IDS, Mood
from ecoguard.rules import (
    BS1_SUSTAINED_CALLS,
    RULES,
    evaluate,
    explain,
    small_model_threshold,
    unquantized_dtype,
)
from ecoguard.rules import impact as impact_module

A800 = GpuSpec(
    profile="a800", name="A800", architecture="ampere", compute_capability=(8, 0), vram_gb=80
)
T4 = GpuSpec(
    profile="t4", name="Tesla T4", architecture="turing", compute_capability=(7, 5), vram_gb=16
)
NO_GPU = GpuSpec()


@pytest.fixture(autouse=True)
def _no_estimator(monkeypatch):
    """Rule logic is tested without the knowledge estimator; impact tests inject a fake."""
    monkeypatch.setattr(impact_module, "estimator_provider", lambda: None)


def dep(**kw) -> Deployment:
    model = kw.pop("model", ModelSpec(id="m", params_b=7.0))
    return Deployment(model=model, **kw)


def bnb8(threshold=6.0, pre=None):
    return QuantSpec(
        method="bitsandbytes",
        bits=8,
        quant_type="int8",
        int8_threshold=threshold,
        pre_quantized=pre,
    )


def fired(deployment, rule, **kw):
    return [f for f in evaluate(deployment, only=[rule], **kw)]


INT8_CASES = [
    ("default threshold", dep(precision="int8_mixed", quant=bnb8()), True),
    (
        "threshold unknown",
        dep(precision="int8_mixed", quant=QuantSpec(method="bitsandbytes", bits=8)),
        True,
    ),
    ("threshold 0", dep(precision="int8_pure", quant=bnb8(0.0)), False),
    ("custom threshold 3", dep(precision="int8_mixed", quant=bnb8(3.0)), True),
    ("fp16", dep(precision="fp16"), False),
    ("nf4", dep(precision="nf4"), False),
    ("precision only (advisor)", dep(precision="int8_mixed"), True),
]


@pytest.mark.parametrize(
    ("case", "deployment", "expected"), INT8_CASES, ids=[c[0] for c in INT8_CASES]
)
def test_int8_mixed(case, deployment, expected):
    found = fired(deployment, "int8-mixed")
    assert bool(found) is expected
    if found:
        finding = found[0]
        assert finding.mood is Mood.ORANGE
        assert "llm_int8_threshold=0.0" in finding.fix
        assert finding.changes_outputs is True
        assert finding.impact is None  # no estimator here


SMALL_CASES = [
    ("1.5B nf4 no gpu", dep(model=ModelSpec(params_b=1.5), precision="nf4"), True),
    ("3B nf4 no gpu (at bound)", dep(model=ModelSpec(params_b=3.0), precision="nf4"), False),
    ("7B nf4 no gpu", dep(model=ModelSpec(params_b=7.0), precision="nf4"), False),
    ("1.1B fp16", dep(model=ModelSpec(params_b=1.1), precision="fp16"), False),
    ("size unknown", dep(model=ModelSpec(), precision="nf4"), False),
    ("0.5B int8", dep(model=ModelSpec(params_b=0.5), precision="int8_mixed"), True),
    (
        "0.5B fp8 is not this rule",
        dep(model=ModelSpec(params_b=0.5), precision="fp8_weight_only"),
        False,
    ),
]


@pytest.mark.parametrize(
    ("case", "deployment", "expected"), SMALL_CASES, ids=[c[0] for c in SMALL_CASES]
)
def test_small_model_quant(case, deployment, expected):
    found = fired(deployment, "small-model-quant")
    assert bool(found) is expected
    if found:
        assert found[0].mood is Mood.ORANGE
        assert "quantization" in found[0].fix


def test_small_model_threshold_uses_crossover(monkeypatch):
    import ecoguard.knowledge as knowledge
    from ecoguard.knowledge.records import Crossover

    def fake(arch, precision):
        return Crossover(
            architecture=arch,
            precision=precision,
            fitted_b=4.8,
            reported_b=4.2,
            method="fake",
            points=3,
            sources=("x.csv",),
        )

    monkeypatch.setattr(knowledge, "crossover", fake)
    threshold = small_model_threshold("ada", "nf4")
    assert (threshold.size_b, threshold.basis, threshold.reported_b) == (4.8, "fitted", 4.2)
    deployment = dep(
        model=ModelSpec(params_b=4.5), precision="nf4", gpu=GpuSpec(architecture="ada")
    )
    (finding,) = fired(deployment, "small-model-quant")
    assert "4.8B crossover" in finding.message and "reports 4.2B" in finding.message
    # Without a GPU the published ~3B bound applies, so 4.5B is fine.
    assert not fired(deployment.with_(gpu=NO_GPU), "small-model-quant")


def test_small_model_threshold_reported_fallback(monkeypatch):
    import ecoguard.knowledge as knowledge
    from ecoguard.knowledge.records import Crossover

    monkeypatch.setattr(
        knowledge,
        "crossover",
        lambda arch, precision: Crossover(
            architecture=arch,
            precision=precision,
            fitted_b=None,
            reported_b=5.2,
            method="fake",
            points=0,
            sources=(),
        ),
    )
    assert small_model_threshold("blackwell", "nf4").basis == "reported"
    assert small_model_threshold(None, "nf4").size_b == 3.0


def test_small_model_threshold_real_tables():
    """Against A's real crossover table (whatever it says, the answer is a positive size)."""
    threshold = small_model_threshold("turing", "nf4")
    assert threshold.size_b > 0
    assert threshold.basis in ("fitted", "reported", "published-bound")


FP8_CASES = [
    (
        "weight-only eager",
        dep(
            precision="fp8_weight_only",
            quant=QuantSpec(method="torchao", quant_type="Float8WeightOnlyConfig", compiled=False),
        ),
        True,
    ),
    ("dynamic, compile unknown", dep(precision="fp8_dynamic"), True),
    (
        "compiled",
        dep(precision="fp8_weight_only", quant=QuantSpec(method="torchao", compiled=True)),
        False,
    ),
    (
        "torchao int4",
        dep(precision=None, quant=QuantSpec(method="torchao", quant_type="Int4WeightOnlyConfig")),
        False,
    ),
    ("bf16", dep(precision="bf16"), False),
]


@pytest.mark.parametrize(
    ("case", "deployment", "expected"), FP8_CASES, ids=[c[0] for c in FP8_CASES]
)
def test_fp8_eager(case, deployment, expected):
    found = fired(deployment, "fp8-eager")
    assert bool(found) is expected
    if found:
        assert found[0].mood is Mood.RED


NIGHTLY_CASES = [
    ("torch dev", SoftwareVersions(torch="2.6.0.dev20250101+cu124"), True),
    ("torchao git", SoftwareVersions(torch="2.5.1", torchao="0.8.0+git1a2b3c"), True),
    ("nightly word", SoftwareVersions(torchao="0.9.0-nightly"), True),
    ("release cpu", SoftwareVersions(torch="2.13.0+cpu", torchao="0.18.0"), False),
    ("release cu", SoftwareVersions(torch="2.5.1+cu121"), False),
    ("transformers dev ignored", SoftwareVersions(transformers="5.0.0.dev0"), False),
    ("unknown", SoftwareVersions(), False),
]


@pytest.mark.parametrize(
    ("case", "software", "expected"), NIGHTLY_CASES, ids=[c[0] for c in NIGHTLY_CASES]
)
def test_nightly_build(case, software, expected):
    found = fired(Deployment(software=software), "nightly-build")
    assert bool(found) is expected
    if found:
        assert found[0].mood is Mood.GRAY


N = BS1_SUSTAINED_CALLS
BS1_CASES = [
    ("sustained", dict(batch_size=1, consecutive_bs1_calls=N, interactive=False), True),
    ("more than sustained", dict(batch_size=1, consecutive_bs1_calls=N * 3), True),
    ("one call", dict(batch_size=1, consecutive_bs1_calls=1, interactive=False), False),
    ("just below", dict(batch_size=1, consecutive_bs1_calls=N - 1), False),
    ("interactive", dict(batch_size=1, consecutive_bs1_calls=N, interactive=True), False),
    ("batched", dict(batch_size=8, consecutive_bs1_calls=N), False),
    ("pattern unknown", dict(batch_size=1), False),
]


@pytest.mark.parametrize(("case", "fields", "expected"), BS1_CASES, ids=[c[0] for c in BS1_CASES])
def test_batch_size_one(case, fields, expected):
    found = fired(dep(precision="fp16", **fields), "batch-size-one")
    assert bool(found) is expected
    if found:
        assert found[0].mood is Mood.YELLOW
        assert "batching=True" in found[0].fix


BF16_CASES = [
    ("bf16 on T4", dep(dtype="bf16", precision="bf16", gpu=T4), True),
    ("bf16 on V100 by arch", dep(dtype="bf16", gpu=GpuSpec(architecture="volta")), True),
    (
        "nf4 with bf16 compute on T4",
        dep(
            precision="nf4",
            quant=QuantSpec(method="bitsandbytes", bits=4, compute_dtype="bf16"),
            gpu=T4,
        ),
        True,
    ),
    ("bf16 on A800", dep(dtype="bf16", gpu=A800), False),
    ("fp16 on T4", dep(dtype="fp16", gpu=T4), False),
    ("bf16, GPU unknown", dep(dtype="bf16"), False),
]


@pytest.mark.parametrize(
    ("case", "deployment", "expected"), BF16_CASES, ids=[c[0] for c in BF16_CASES]
)
def test_bf16_unsupported(case, deployment, expected):
    assert bool(fired(deployment, "bf16-unsupported")) is expected


KV = ModelSpec(id="m", params_b=7.0, layers=32, kv_heads=8, head_dim=128)
VRAM_CASES = [
    ("7B fp16 on 12GB", dep(model=KV, precision="fp16", gpu=GpuSpec(vram_gb=12)), True),
    # A short prompt stated (the default 512-token prompt takes this one just past 16 GB).
    (
        "7B fp16 on 16GB, weights only fit",
        dep(model=KV, precision="fp16", gpu=T4, prompt_tokens=128),
        False,
    ),
    ("7B nf4 on 16GB", dep(model=KV, precision="nf4", gpu=T4), False),
    ("7B fp16 on 80GB", dep(model=KV, precision="fp16", gpu=A800), False),
    (
        "KV cache overflow",
        dep(
            model=KV,
            precision="fp16",
            gpu=A800,
            batch_size=64,
            prompt_tokens=4096,
            generation_tokens=4096,
        ),
        True,
    ),
    ("two 16GB GPUs", dep(model=KV, precision="fp16", gpu=GpuSpec(vram_gb=16, count=2)), False),
    ("VRAM unknown", dep(model=KV, precision="fp16"), False),
]


@pytest.mark.parametrize(
    ("case", "deployment", "expected"), VRAM_CASES, ids=[c[0] for c in VRAM_CASES]
)
def test_vram_overflow(case, deployment, expected):
    found = fired(deployment, "vram-overflow")
    assert bool(found) is expected
    if found:
        assert found[0].mood is Mood.RED


class _Est:
    def __init__(self, per_1k, tier="measured"):
        self.energy_per_1k_tokens_j = per_1k
        self.tier = tier
        self.rows = ("row-1",)


@pytest.mark.parametrize(
    ("measured", "expected_mood"),
    [
        (0.5, None),
        (0.7, None),
        (0.8, Mood.YELLOW),
        (2.0, Mood.ORANGE),
        (0.2, Mood.GRAY),
        (None, None),
    ],
)
def test_reference_deviation(monkeypatch, measured, expected_mood):
    # reference: 500 J per 1k tokens = 0.5 J/token
    monkeypatch.setattr(impact_module, "estimator_provider", lambda: lambda d, **kw: _Est(500.0))
    found = evaluate(
        dep(precision="fp16", gpu=A800), only=["reference-deviation"], measured_j_per_token=measured
    )
    assert (found[0].mood if found else None) == expected_mood
    if found:
        assert found[0].evidence == ("row-1",)


@pytest.mark.parametrize(
    ("measured", "expected_mood"),
    [(0.9, None), (1.2, None), (1.3, Mood.YELLOW), (0.2, None), (0.1, Mood.GRAY)],
)
def test_reference_deviation_respects_the_reference_range(monkeypatch, measured, expected_mood):
    """A reference of 0.5 J/token with a p10-p90 range of 0.15-1.25 J/token (a figure carried
    from other GPUs): 0.9 J/token is 1.8x the centre but inside the range, so no alert."""
    est = _Est(500.0, tier="extrapolated")
    est.energy_per_1k_tokens_j_range = (150.0, 1250.0)
    monkeypatch.setattr(impact_module, "estimator_provider", lambda: lambda d, **kw: est)
    found = evaluate(
        dep(precision="fp16", gpu=A800), only=["reference-deviation"], measured_j_per_token=measured
    )
    assert (found[0].mood if found else None) == expected_mood
    if found:
        assert "range 0.15-1.25" in found[0].message


def test_reference_deviation_without_reference():
    assert not evaluate(
        dep(precision="fp16"), only=["reference-deviation"], measured_j_per_token=9.0
    )


def test_evaluate_orders_by_severity_and_honours_off():
    deployment = dep(
        model=ModelSpec(params_b=1.0),
        precision="int8_mixed",
        quant=bnb8(),
        software=SoftwareVersions(torch="2.6.0.dev20250101"),
    )
    rules = [f.rule for f in evaluate(deployment)]
    assert rules == ["int8-mixed", "small-model-quant", "nightly-build"]
    off = Settings(rules={"int8-mixed": "off"})
    assert [f.rule for f in evaluate(deployment, settings=off)] == [
        "small-model-quant",
        "nightly-build",
    ]
    assert [f.rule for f in evaluate(deployment, only=["nightly-build"])] == ["nightly-build"]


def test_evaluate_rejects_unknown_rule():
    with pytest.raises(UsageError, match="unknown rule 'nope'"):
        evaluate(Deployment(), only=["nope"])


def test_a_raising_rule_is_a_fault_not_an_error(monkeypatch):
    from ecoguard.faults import fault_counts, reset_faults
    from ecoguard.rules import RuleSpec

    reset_faults()

    def boom(deployment, context):
        raise RuntimeError("broken rule")

    table = dict(RULES)
    table["int8-mixed"] = RuleSpec("int8-mixed", "t", "s", True, check=boom)
    monkeypatch.setattr("ecoguard.rules.RULES", table)
    found = evaluate(dep(precision="int8_mixed", software=SoftwareVersions(torch="2.6.0.dev1")))
    assert [f.rule for f in found] == ["nightly-build"]
    assert fault_counts()["rules.int8-mixed"] == 1


def test_rules_cover_rule_ids_and_explain():
    assert tuple(RULES) == RULE_IDS
    for rule_id in RULE_IDS:
        info = explain(rule_id)
        assert info["id"] == rule_id and info["why"] and info["fix"] and info["title"]
        for row in info["evidence"]:
            assert row["tier"] in ("measured", "reported") and row["id"]
    with pytest.raises(UsageError):
        explain("int9")


def test_unquantized_dtype():
    assert unquantized_dtype(dep(gpu=A800)) == "bf16"
    assert unquantized_dtype(dep(gpu=T4)) == "fp16"
    assert unquantized_dtype(dep()) is None


def test_rules_module_does_not_import_heavy_libraries():
    import subprocess
    import sys

    code = (
        "import sys, ecoguard.rules, ecoguard.voice\n"
        "from ecoguard.rules import evaluate\n"
        "from ecoguard.deployment import Deployment\n"
        "evaluate(Deployment(precision='nf4'))\n"
        "bad = [m for m in ('torch', 'transformers', 'pynvml', 'prometheus_client') if m in sys.modules]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_small_model_quant_names_the_architecture_when_no_crossover_is_known():
    from ecoguard.rules import evaluate

    findings = evaluate(
        Deployment(
            model=ModelSpec(params_b=0.5),
            gpu=GpuSpec(profile="v100", architecture="volta"),
            precision="nf4",
        ),
        only=["small-model-quant"],
    )
    assert findings, "a 0.5B NF4 model is below the published ~3B bound"
    assert "no crossover is fitted or reported for volta" in findings[0].message
    assert "no GPU architecture is known" not in findings[0].message


def test_vram_overflow_fix_matches_what_overflows():
    from ecoguard.rules import evaluate

    t4 = GpuSpec(profile="tesla_t4", architecture="turing", vram_gb=16.0)
    weights_too_big = Deployment(
        model=ModelSpec(params_b=70.0, layers=80, hidden_size=8192, kv_heads=8, head_dim=128),
        gpu=t4,
        precision="fp16",
        batch_size=1,
        prompt_tokens=128,
        generation_tokens=128,
    )
    (finding,) = evaluate(weights_too_big, only=["vram-overflow"])
    assert "load_in_4bit" in finding.fix and "max_new_tokens" not in finding.fix
    cache_too_big = Deployment(
        model=ModelSpec(params_b=7.0, layers=32, hidden_size=4096, kv_heads=32, head_dim=128),
        gpu=t4,
        precision="nf4",
        batch_size=64,
        prompt_tokens=4096,
        generation_tokens=4096,
    )
    (finding,) = evaluate(cache_too_big, only=["vram-overflow"])
    assert "max_new_tokens" in finding.fix


def test_every_finding_takes_its_id_title_and_changes_outputs_from_the_rule_table(monkeypatch):
    # One deployment per rule that fires it; each finding must read as its row of RULES says.
    small = ModelSpec(id="m", params_b=0.5)
    firing = {
        "int8-mixed": dep(precision="int8_mixed", quant=bnb8()),
        "small-model-quant": dep(model=small, gpu=A800, precision="nf4"),
        "fp8-eager": dep(
            precision="fp8_weight_only",
            quant=QuantSpec(method="torchao", bits=8, quant_type="float8_weight_only"),
        ),
        "nightly-build": dep(software=SoftwareVersions(torch="2.6.0.dev20240101")),
        "batch-size-one": dep(batch_size=1, consecutive_bs1_calls=BS1_SUSTAINED_CALLS),
        "bf16-unsupported": dep(gpu=T4, precision="bf16", dtype="bf16"),
        "vram-overflow": dep(model=ModelSpec(id="m", params_b=70.0), gpu=T4, precision="fp16"),
        "reference-deviation": dep(precision="fp16", gpu=A800),
    }
    assert tuple(firing) == RULE_IDS
    for rule_id, deployment in firing.items():
        if rule_id == "reference-deviation":  # it needs a reference: 0.5 J/token, 4x below
            reference = lambda: lambda d, **kw: _Est(500.0)  # noqa: E731
            monkeypatch.setattr(impact_module, "estimator_provider", reference)
        found = evaluate(deployment, only=[rule_id], measured_j_per_token=2.0)
        assert len(found) == 1, rule_id
        (finding,) = found
        spec = RULES[rule_id]
        assert (finding.rule, finding.title) == (spec.id, spec.title)
        assert finding.changes_outputs is spec.changes_outputs
        assert finding.mood in spec.moods


def test_the_rule_table_does_not_import_the_checks():
    # The dependency points one way: checks -> table, and ecoguard.rules joins the two.
    import ast
    from pathlib import Path

    import ecoguard.rules.table as table

    tree = ast.parse(Path(table.__file__).read_text(encoding="utf-8"))
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module is not None
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {name for name in imported if name.startswith("ecoguard.rules")}, imported
