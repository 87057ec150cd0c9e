"""Every figure that data/README.md, docs/knowledge.md and the rule texts state about the data,
recomputed here from the rows (data/reference_rows.json) and the tables.

The README sections are scanned for numbers: each one must equal (at the precision printed) a
value recomputed below, so a figure added without a check, or left stale by a data change,
fails. Names, versions, dates and ids are stripped first (they are not claims about the rows).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from knowledge_support import build_script

from ecoguard.deployment import Deployment, GpuSpec, ModelSpec
from ecoguard.knowledge import crossover, data_counts, gpu_profiles, model_registry, regions
from ecoguard.knowledge.crossover import ARCHITECTURES, REPORTED_B, fit_points
from ecoguard.knowledge.envelope import envelope, idle_w, row_overhead_per_layer_s
from ecoguard.knowledge.estimator import estimate
from ecoguard.knowledge.evidence import MIN_TOKENS, Evidence, usable
from ecoguard.knowledge.ladder import SHIPPED, Ladder, Query
from ecoguard.knowledge.memory import memory_need
from ecoguard.knowledge.records import ReferenceRow
from ecoguard.rules import RULES, evaluate

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data"
UPSTREAM = DATA / "upstream"
SHARED = (REPO / ".." / "shared" / "reference-data").resolve()

# Text that carries digits but is not a figure about the rows.
NOT_CLAIMS = [
    r"`[^`]*`",
    r"Qwen2-7B's 7\.62B|\b7B for\b|\bat 7B\b",
    r"J/1k|SHA-256",
    r"\b(?:Qwen2(?:\.5)?|qwen2(?:\.5)?)-\d+(?:\.\d+)?[Bb]\b",
    r"\b(?:Yi|yi)-1\.5-\d+[Bb]\b",
    r"\b(?:Mistral|mistral)-7[Bb]\b",
    r"\bPhi-3-mini\b|\bTinyLlama-1\.1B\b",
    r"\bRTX\s+(?:PRO\s+)?\d+D?\b|\bA800(?:-SXM4-80GB)?\b",
    r"\b\d{4}-\d{2}-\d{2}\b|\bFeb-\d+\b|\b(?:July|Sep) \d{4}\b",
    r"\bv2\.3(?:\.0)?\b|\btorchao \d+\.\d+(?:\.\d+)?\b|\bbnb \d+\.\d+\.\d+\b",
    r"LLM\.int8\(\)|\bINT8\b|\bFP16\b|\bFP8\b|\bNF4\b",
    r"\bBS \d+\b",
    r"\bx 1000\b|\b1000 /",
]
NUMBER = re.compile(r"(?<![\w.])[+-]?\d[\d,]*(?:\.\d+)?")


def _rows() -> list[ReferenceRow]:
    payload = json.loads((DATA / "reference_rows.json").read_text(encoding="utf-8"))
    return [ReferenceRow(**row) for row in payload["rows"]]


ROWS = _rows()
BY_ID = {r.id: r for r in ROWS}


def _section(text: str, heading: str) -> str:
    start = text.index("## " + heading)
    end = text.find("\n## ", start + 3)
    return text[start : end if end != -1 else len(text)]


def _numbers(text: str) -> list[str]:
    for pattern in NOT_CLAIMS:
        text = re.sub(pattern, " ", text)
    return NUMBER.findall(text.split("\n", 1)[1])  # not the heading


def _unchecked(text: str, expected: list[float]) -> list[str]:
    """Numbers in ``text`` that match no recomputed value at the precision printed."""
    missing = []
    for token in _numbers(text):
        value = float(token.replace(",", ""))
        decimals = len(token.split(".")[1]) if "." in token else 0
        if not any(round(e, decimals) == value for e in expected):
            missing.append(token)
    return missing


def _stated(row: ReferenceRow) -> float:
    return row.energy_j_per_1k_stated or row.energy_j_per_1k


def _deltas(pred) -> list[float]:
    return [r.delta_vs_fp16_pct for r in ROWS if pred(r) and r.delta_vs_fp16_pct is not None]


def _span(values: list[float]) -> list[float]:
    return [min(values), max(values)]


# --------------------------------------------------------------------------- data/README.md


def _fp16_spread(gpu: str) -> tuple[str, float, float, float]:
    """Per model on ``gpu``: every measured FP16 baseline energy (FP16 rows, and the FP16 figure
    of anchor rows that have no FP16 row); the model whose baselines differ the most."""
    found: dict[str, set[float]] = {}
    for r in ROWS:
        if r.gpu != gpu or r.tier != "measured" or r.scope != "end_to_end":
            continue
        if r.precision == "fp16":
            found.setdefault(r.model_key, set()).add(round(r.energy_j_per_1k, 2))
        elif r.baseline_row is None and r.fp16_energy_j_per_1k is not None:
            found.setdefault(r.model_key, set()).add(round(r.fp16_energy_j_per_1k, 2))
    worst = max(found, key=lambda k: max(found[k]) / min(found[k]))
    low, high = min(found[worst]), max(found[worst])
    return worst, low, high, (high / low - 1) * 100


def test_readme_fp16_baseline_spread_is_what_its_example_shows():
    """The old text said 'up to 20%' beside an example (1182..1551 J/1k) that differs by 31%."""
    text = (DATA / "README.md").read_text(encoding="utf-8")
    model, low, high, spread = _fp16_spread("rtx4090")
    assert round(spread) == 31
    claim = re.search(
        r"differ by up to (\d+)% between sessions\s+\((\S+) ([\d,]+) to ([\d,]+)", text
    )
    assert claim, "the FP16 baseline spread claim is missing"
    assert int(claim.group(1)) == round(spread)
    assert claim.group(2) == model
    assert float(claim.group(3).replace(",", "")) == round(low)
    assert float(claim.group(4).replace(",", "")) == round(high)


def test_readme_known_disagreements_are_recomputed_from_rows():
    text = _section((DATA / "README.md").read_text(encoding="utf-8"), "Known disagreements")
    r = BY_ID
    sweep = {x.batch_size: x for x in ROWS if "batch_size_raw" in x.source}
    guide1 = r["a800/mistral-7b/int8_pure/bs1/bsguide-prose"]
    guide64 = r["a800/mistral-7b/int8_pure/bs64/bsguide-prose"]
    a800_json = r["a800/mistral-7b/int8_pure/bs1/ecai-a800json"]
    a800_quick = r["a800/mistral-7b/int8_pure/bs1/dyn-a800meta"]
    run_tokens = re.search(r"generated tokens per run ([\d/]+)", a800_json.note).group(1)
    hardware = json.loads(
        (UPSTREAM / "ecocompute-dynamic-eval/metadata/a800_metadata.json").read_text()
    )["hardware"]["gpu"]
    other_ppl = json.loads(
        (UPSTREAM / "ecocompute-ai/data/a800_results/ppl_yi15_9b_int8_default.json").read_text()
    )["results"]["perplexity"]

    def stated_delta(ident: str) -> float:
        row = r[ident]
        return (_stated(row) / _stated(r[row.baseline_row]) - 1) * 100

    sep_7b = [
        x
        for x in ROWS
        if x.source.endswith("rtx5090_bnb_2026-09-20.csv")
        and x.model_key == "qwen2-7b"
        and x.precision == "nf4"
    ]

    def int8_4090(tag: str, small: bool) -> list[float]:
        return _deltas(
            lambda x: (
                x.gpu == "rtx4090"
                and x.precision == "int8_mixed"
                and f"/{tag}" in x.id
                and (x.model_key != "qwen2-7b") is small
            )
        )

    _, low, high, spread = _fp16_spread("rtx4090")
    expected = [
        guide1.energy_j_per_request,
        guide1.energy_j_per_1k,
        guide64.energy_j_per_request,
        sweep[1].energy_j_per_request,
        sweep[1].energy_j_per_1k,
        sweep[64].energy_j_per_request,
        (guide64.energy_j_per_request / guide1.energy_j_per_request - 1) * 100,
        (sweep[64].energy_j_per_request / sweep[1].energy_j_per_request - 1) * 100,
        a800_json.energy_j_per_1k,
        a800_json.n_runs,
        max(int(t) for t in run_tokens.split("/")),
        a800_quick.energy_j_per_1k,
        a800_quick.n_runs,
        a800_quick.generation_tokens,
        sweep[1].prompt_tokens,
        sweep[1].generation_tokens,
        float(hardware["full_name"].split()[-2].rstrip("GB")),
        float(hardware["vram"].split("GB")[0]),
        float(hardware["tdp"].rstrip("W")),
        r["a800/yi-1.5-9b/int8_mixed/bs1/ecai-a800json"].perplexity,
        other_ppl,
        r["rtx4090d/yi-1.5-6b/nf4/bs1/memo-prose"].throughput_tok_s,
        _stated(r["rtx4090d/yi-1.5-6b/nf4/bs1/memo-prose"]),
        stated_delta("rtx4090d/yi-1.5-6b/nf4/bs1/memo-prose"),
        _stated(r["rtx4090d/qwen2.5-7b/fp16/bs1/memo-prose"]),
        r["rtx4090d/yi-1.5-6b/nf4/bs1/v23-prose/nf4"].throughput_tok_s,
        _stated(r["rtx4090d/yi-1.5-6b/nf4/bs1/v23-prose/nf4"]),
        stated_delta("rtx4090d/yi-1.5-6b/nf4/bs1/v23-prose/nf4"),
        _stated(r["rtx4090d/qwen2.5-7b/fp16/bs1/v23-prose/nf4"]),
        _stated(r["rtx4090d/phi-3-mini/fp16/bs1/memo-prose"]),
        _stated(r["rtx4090d/phi-3-mini/fp16/bs1/v23-prose/nf4"]),
        stated_delta("rtx4090d/phi-3-mini/nf4/bs1/memo-prose"),
        stated_delta("rtx4090d/phi-3-mini/nf4/bs1/v23-prose/nf4"),
        r["rtx5090/qwen2-1.5b/nf4/bs1/ecai-5090csv"].energy_j_per_1k,
        r["rtx5090/qwen2-1.5b/nf4/bs1/v23-prose/earlier"].energy_j_per_1k,
        r["rtx5090/qwen2-7b/nf4/bs1/ecai-5090csv"].delta_vs_fp16_pct,
        r["rtx5090/qwen2-7b/nf4/bs1/ecai-5090csv"].generation_tokens,
        *_span([x.delta_vs_fp16_pct for x in sep_7b]),
        *{x.n_runs for x in sep_7b},
        *{x.generation_tokens for x in sep_7b},
        r["rtx5090/qwen2.5-7b/nf4/bs1/v23-prose"].delta_vs_fp16_pct,
        *_span(int8_4090("qe-4090paired", False)),
        *_span(int8_4090("qe-4090rep", False)),
        *_span(int8_4090("qe-anchor", False)),
        *_span(int8_4090("qe-4090paired", True) + int8_4090("qe-4090rep", True)),
        spread,
        low,
        high,
        *_span(_deltas(lambda x: x.id == "rtx4090/qwen2.5-3b/nf4/bs1/qe-4090paired")),
        *_span(
            _deltas(
                lambda x: x.source.endswith("rtx4090_bnb_2026-09-25.csv") and x.precision == "nf4"
            )
        ),
        *_span(_deltas(lambda x: x.precision == "fp8_weight_only" and x.tier == "reported")),
        *_span(_deltas(lambda x: x.precision == "fp8_weight_only" and x.tier == "measured")),
    ]
    assert len({x.n_runs for x in sep_7b}) == len({x.generation_tokens for x in sep_7b}) == 1
    assert _unchecked(text, expected) == []
    assert len(_numbers(text)) >= 50  # the scan sees the figures (guards a broken regex)


def test_readme_treatment_section_lists_every_changed_row():
    text = _section((DATA / "README.md").read_text(encoding="utf-8"), "Tiers, sizes and idle")
    quoted = [r for r in ROWS if r.tier == "reported" and not r.source.endswith(".md")]
    corrected = [r for r in ROWS if r.idle_added_w is not None]
    apart = [r for r in ROWS if r.scope == "idle_subtracted"]
    quotes = [r for r in ROWS if r.quotes]
    offloaded = [r for r in ROWS if r.offloaded]
    for row in (*quoted, *corrected, *apart, *quotes, *offloaded):
        assert f"`{row.id}`" in text, row.id
    mismatch = max(
        abs(r.power_w * 1000 / r.throughput_tok_s / r.energy_j_per_1k - 1) * 100
        for r in ROWS
        if r.scope == "end_to_end" and r.power_w and r.throughput_tok_s and r.energy_j_per_1k
    )
    idles = [r.idle_added_w for r in corrected]
    expected = [len(quoted), len(corrected), len(apart), min(idles), max(idles), mismatch]
    for row in corrected:
        expected += [row.idle_added_w, _stated(row), row.energy_j_per_1k]
    # The quotes and offloaded bullets: counts, the same-run threshold, the memory verdicts.
    expected += [len(quotes), len(offloaded), build_script().SAME_RUN_ENERGY_J, 0]
    for row in offloaded:
        gpu = gpu_profiles()[row.gpu]
        dep = Deployment(
            model=model_registry()[row.model_key].to_model_spec(),
            gpu=gpu.to_gpu_spec(),
            precision=row.precision,
            batch_size=row.batch_size or 1,
        )
        need = memory_need(
            dep,
            model_registry()[row.model_key],
            prompt_tokens=row.prompt_tokens or 0,
            generation_tokens=row.generation_tokens or 1,
        )
        expected += [need.total_gb, gpu.vram_gb]
    assert _unchecked(text, expected) == []
    assert model_registry()["qwen2-7b"].params_b == 7.62 and "Qwen2-7B's 7.62B" in text
    assert len(quoted) == 4 and len(corrected) == 27 and len(apart) == 9


def test_readme_counts_and_sources_tables_match_rows():
    text = (DATA / "README.md").read_text(encoding="utf-8")
    tiers = {t: sum(r.tier == t for r in ROWS) for t in {r.tier for r in ROWS}}
    heading = f"## Counts ({len(ROWS)} rows: " + ", ".join(
        f"{n} {t}" for t, n in sorted(tiers.items())
    )
    assert heading in text
    scopes = {s: sum(r.scope == s for r in ROWS) for s in {r.scope for r in ROWS}}
    assert "Scopes: " + ", ".join(f"{n} {s}" for s, n in sorted(scopes.items())) + "." in text
    for source in {r.source for r in ROWS}:
        assert f"| `{source}` | {sum(r.source == source for r in ROWS)} |" in text
    for gpu, precision, tier in {(r.gpu, r.precision, r.tier) for r in ROWS}:
        n = sum((r.gpu, r.precision, r.tier) == (gpu, precision, tier) for r in ROWS)
        assert f"| {gpu} | {precision} | {tier} | {n} |" in text


@pytest.mark.skipif(not SHARED.is_dir(), reason="the formula dataset is not vendored")
def test_readme_excluded_dataset_row_count():
    path = SHARED / "ecocompute-ai/ecocompute_benchmark_dataset.json"
    count = len(json.loads(path.read_text())["data"])
    assert f"ecocompute_benchmark_dataset.json` ({count} rows)" in (DATA / "README.md").read_text()


# --------------------------------------------------------------------------- the rows themselves


def test_idle_corrections_add_back_exactly_the_stated_idle_energy():
    for row in ROWS:
        if row.idle_added_w is None:
            assert row.energy_j_per_1k_stated is None
            continue
        assert row.scope == "end_to_end" and row.gpu == "rtx4090d"
        added = row.idle_added_w * 1000 / row.throughput_tok_s
        assert row.energy_j_per_1k == pytest.approx(row.energy_j_per_1k_stated + added, abs=0.01)
        assert 15 < row.idle_added_w < 19
        assert "added back" in row.note


def test_no_pair_mixes_idle_subtracted_and_idle_inclusive_rows():
    """An end-to-end row pairs only with an end-to-end baseline; an idle-subtracted row keeps
    its baseline's id (the experiment's pairing) but its FP16 energy on its own basis."""
    for row in ROWS:
        if not row.baseline_row:
            continue
        base = BY_ID[row.baseline_row]
        if row.scope == "end_to_end":
            assert base.scope == "end_to_end", row.id
        elif row.scope == "idle_subtracted" and row.fp16_energy_j_per_1k is not None:
            assert row.fp16_energy_j_per_1k == _stated(base), row.id
    # Every RTX 4090D memo row has its idle added back (all 13 print power and throughput).
    memo = [r for r in ROWS if r.source.endswith("COMPLETE_DATASET_MEMO.md")]
    assert len(memo) == 13 and all(r.idle_added_w is not None for r in memo)


def test_quoted_pure_int8_rows_are_reported_not_measured():
    quoted = [
        r for r in ROWS if r.source.endswith("pure_int8_metadata.json") and "Previous" in r.note
    ]
    assert len(quoted) == 4
    assert all(r.tier == "reported" and "unpublished" in r.note for r in quoted)
    for row in quoted:  # the same figures as the memo's prose row
        memo = BY_ID[row.id.replace("dyn-pureint8", "memo-prose")]
        assert memo.tier == "reported" and memo.energy_j_per_1k == row.energy_j_per_1k


def test_row_sizes_come_from_the_model_registry():
    """A query for a measured model must match its rows exactly, not count as extrapolation."""
    registry = model_registry()
    for row in ROWS:
        if row.model_key in registry:
            assert row.params_b == registry[row.model_key].params_b, row.id
    assert all(row.model_key in registry for row in ROWS)


# --------------------------------------------------------------------------- crossover inputs


def _pair_row(ident: str, energy: float | None, fp16: float | None, delta: float | None):
    return replace(
        BY_ID["rtx4090/qwen2-7b/int8_mixed/bs1/qe-4090paired"],
        id=ident,
        energy_j_per_1k=energy,
        fp16_energy_j_per_1k=fp16,
        delta_vs_fp16_pct=delta,
    )


def test_fit_points_one_per_measured_pair():
    rows = [
        _pair_row("a", 200.0, 100.0, 100.0),
        _pair_row("b", 200.0, 100.0, 100.0),  # the same pair printed by another file
        _pair_row("c", None, None, 100.0),  # quotes a delta, measured nothing
        _pair_row("d", 300.0, 100.0, 200.0),
    ]
    points = fit_points(rows, {"rtx4090"}, "int8_mixed")
    assert sorted(delta for _, delta, _ in points) == [100.0, 200.0]


def test_crossover_points_are_the_distinct_measured_pairs():
    ada = {k for k, p in gpu_profiles().items() if p.architecture == "ada"}
    pairs = {
        (r.gpu, r.model_key, round(r.energy_j_per_1k, 1), round(r.fp16_energy_j_per_1k, 1))
        for r in ROWS
        if r.gpu in ada
        and r.precision == "int8_mixed"
        and r.tier == "measured"
        and r.scope == "end_to_end"
        and r.batch_size == 1
        and r.energy_j_per_1k is not None
        and r.fp16_energy_j_per_1k is not None
    }
    assert crossover("ada", "int8_mixed").points == len(pairs)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("precision", ["nf4", "nf4_dq", "int8_mixed", "int8_pure"])
def test_fitted_crossover_only_inside_measured_sizes(arch, precision):
    found = crossover(arch, precision)
    if found.fitted_b is not None:
        assert found.measured_min_b <= found.fitted_b <= found.measured_max_b
    if found.root_b is not None and found.fitted_b is None:
        assert not found.measured_min_b <= found.root_b <= found.measured_max_b


def test_int8_mixed_saves_nowhere_so_no_crossover_is_fitted():
    """Before: 'below the 11.3B crossover (the crossover fitted ... for ada)' where no measured
    int8_mixed pair on ada saved energy."""
    for arch in ("ada", "ampere", "blackwell"):
        found = crossover(arch, "int8_mixed")
        assert found.points and not found.saving_measured and found.fitted_b is None


# --------------------------------------------------------------------------- rule texts


def _small_model_message(arch: str, precision: str, size: float) -> str | None:
    deployment = Deployment(
        model=ModelSpec(params_b=size), gpu=GpuSpec(architecture=arch), precision=precision
    )
    found = evaluate(deployment, only=["small-model-quant"])
    return found[0].message if found else None


@pytest.mark.parametrize("arch", ["turing", "ampere", "ada", "blackwell"])
@pytest.mark.parametrize("precision", ["nf4", "int8_mixed"])
@pytest.mark.parametrize("size", [0.5, 1.5, 3.0, 7.0])
def test_small_model_messages_cite_only_what_the_pairs_show(arch, precision, size):
    message = _small_model_message(arch, precision, size)
    if message is None:
        return
    found = crossover(arch, precision)
    fitted = re.search(r"below the ([\d.]+)B crossover \(the crossover fitted", message)
    if fitted:
        assert found.fitted_b is not None
        assert float(fitted.group(1)) == round(found.fitted_b, 1)
        assert found.measured_min_b <= found.fitted_b <= found.measured_max_b
    every = re.search(r"every measured \S+ pair on \S+ \(([\d.]+)B to ([\d.]+)B\)", message)
    if every:
        points = fit_points(
            ROWS, {k for k, p in gpu_profiles().items() if p.architecture == arch}, precision
        )
        assert points and all(delta > 0 for _, delta, _ in points)
        assert float(every.group(1)) == float(f"{found.measured_min_b:.3g}")
        assert float(every.group(2)) == float(f"{found.measured_max_b:.3g}")
        assert "no crossover has been observed" in message
    assert fitted or every or "published bound" in message or "reported crossover" in message


def test_ada_int8_mixed_message_says_not_observed():
    message = _small_model_message("ada", "int8_mixed", 7.0)
    assert "crossover fitted" not in message
    assert "no crossover has been observed" in message and "beyond the measured sizes" in message
    # A root far past the measured sizes (ampere int8_mixed: 7-15B measured) is not quoted.
    far = crossover("ampere", "int8_mixed")
    assert far.root_b > 4 * far.measured_max_b
    message = _small_model_message("ampere", "int8_mixed", 0.135)
    assert f"{far.root_b:.3g}" not in message and "smaller than any measured one" in message


def test_rule_why_texts_match_the_rows():
    int8 = _deltas(
        lambda r: r.precision == "int8_mixed" and r.scope == "end_to_end" and r.tier == "measured"
    )
    assert (
        f"+{min(int8):.0f}% to +{max(int8):.0f}% in every measured pair" in RULES["int8-mixed"].why
    )
    ppl = []
    for row in ROWS:
        if row.precision == "int8_pure" and row.perplexity and row.tier == "measured":
            (base,) = [
                b
                for b in ROWS
                if (b.gpu, b.model_key, b.precision, b.tier)
                == (row.gpu, row.model_key, "fp16", "measured")
                and b.perplexity
            ]
            ppl.append((row.perplexity / base.perplexity - 1) * 100)
    assert f"{min(ppl):+.1f}% to {max(ppl):+.1f}% vs FP16" in RULES["int8-mixed"].why
    fp8 = [
        1 + d / 100
        for d in _deltas(
            lambda r: (
                r.precision.startswith("fp8") and r.scope == "end_to_end" and r.tier == "measured"
            )
        )
    ]
    assert f"{min(fp8):.1f}x to {max(fp8):.1f}x the energy of FP16" in RULES["fp8-eager"].why
    sweep = sorted(
        (r.batch_size, r.energy_j_per_request) for r in ROWS if "batch_size_raw" in r.source
    )
    per_request = [e for _, e in sweep]
    assert per_request == sorted(per_request, reverse=True)  # "falls steeply with batch size"
    assert per_request[-1] / per_request[0] < 0.1


# --------------------------------------------------------------------------- docs/knowledge.md


def test_docs_data_and_crossover_sections():
    docs = (REPO / "docs" / "knowledge.md").read_text(encoding="utf-8")
    data = _section(docs, "Data")
    corrected = [r for r in ROWS if r.idle_added_w is not None]
    idles = [r.idle_added_w for r in corrected]
    quoted = [r for r in ROWS if r.tier == "reported" and not r.source.endswith(".md")]
    models = json.loads((DATA / "models.json").read_text())["models"]
    pue = json.loads((DATA / "regions.json").read_text())["pue"]
    expected = [
        len(gpu_profiles()),
        len(models),
        len(regions()),
        pue["cloud"],
        pue["local"],
        len(quoted),
        min(idles),
        max(idles),
        len(corrected),
        sum(r.scope == "idle_subtracted" for r in ROWS),
        *_one_run_and_offloaded_figures(),
    ]
    assert _unchecked(data, expected) == []
    assert f"{len(gpu_profiles())} profiles" in data and f"{len(models)} models" in data
    cross = _section(docs, "Crossover")
    published = ", ".join(
        f"{arch.capitalize()} {REPORTED_B[(arch, 'nf4')]:g}"
        for arch in ("turing", "ada", "blackwell")
    )
    assert f"({published} B)" in cross
    int8_archs = [a for a in ARCHITECTURES if crossover(a, "int8_mixed").points]
    assert int8_archs and not any(crossover(a, "int8_mixed").saving_measured for a in int8_archs)
    assert "int8_mixed on" in cross and "every architecture measured" in cross


def _one_run_and_offloaded_figures() -> list[float]:
    """Figures of the Data section's quotes, offloaded and published-counts bullets."""
    counts = data_counts()
    offloaded = [r for r in ROWS if r.offloaded]
    needs = [float(r.note.rsplit("needs ", 1)[1].split(" GB")[0]) for r in offloaded]
    vram = [gpu_profiles()[r.gpu].vram_gb for r in offloaded]
    published = counts.published
    return [
        build_script().SAME_RUN_ENERGY_J,
        counts.quoted_copies,
        counts.offloaded_rows,
        0,  # unstated prompt lengths count as 0 tokens
        *needs,
        *vram,
        published.configurations_claimed,
        published.primary,
        published.tesla_t4,
        published.supplementary,
    ]


def test_docs_envelope_section():
    """The envelope's figures in docs/knowledge.md, recomputed (the L4 'before' figures are the
    pre-issue-30 answer, stated as such)."""
    docs = (REPO / "docs" / "knowledge.md").read_text(encoding="utf-8")
    section = _section(docs, "Physical envelope")
    profiles = gpu_profiles()
    per_gpu: dict[str, list[float]] = {}
    for r in ROWS:
        if r.precision != "fp16" or r.tier == "reported" or not usable(r):
            continue
        if (r.generation_tokens or MIN_TOKENS) < MIN_TOKENS:
            continue
        seconds = row_overhead_per_layer_s(r, profiles[r.gpu])
        if seconds is not None:
            per_gpu.setdefault(r.gpu, []).append(seconds * profiles[r.gpu].tdp_w)
    others = [v for g, vs in per_gpu.items() if g != "tesla_t4" for v in vs]
    l4 = profiles["l4"]
    ev = Evidence(tuple(ROWS))
    env = envelope(ev, l4, "llama-2-7b", 6.74, "fp16", 1)
    dep = Deployment(model=ModelSpec(id="llama-2-7b"), gpu=GpuSpec(profile="l4"), precision="fp16")
    now = estimate(dep)
    # The same question to a ladder built without the envelope (the estimator's own is shipped).
    query = Query(l4, "llama-2-7b", model_registry()["llama-2-7b"].params_b, "fp16", 1)
    unbounded = Ladder(ev, replace(SHIPPED, envelope=False)).resolve(query)
    assert unbounded is not None and unbounded.family == "cross-gpu"
    without = unbounded.figure.value
    idle_share = idle_w(l4)[0] / l4.tdp_w * 100
    expected = [
        1,
        64,
        min(others),
        max(others),
        min(per_gpu["tesla_t4"]),
        max(per_gpu["tesla_t4"]),
        idle_share,
        16_210,  # before issue 30
        12_302,
        23_568,
        without,
        l4.tdp_w,
        l4.mem_bandwidth_gbs,
        6.74e9 * 2 / (l4.mem_bandwidth_gbs * 1e9) * 1000,
        32,
        max(per_gpu["tesla_t4"]),
        now.energy_per_1k_tokens_j,
        *now.energy_per_1k_tokens_j_range,
    ]
    text = section.replace("Llama-2-7B", " ").replace("RTX 5090", " ").replace("PRO 6000", " ")
    assert _unchecked(text, expected) == []
    assert now.energy_per_1k_tokens_j == pytest.approx(env.high_j_per_1k)


def test_number_scan_catches_a_wrong_figure():
    """The scan itself: a figure that matches nothing recomputed is reported."""
    text = "## X\nbaselines differ by up to 20% (qwen2-0.5b 1,183 to 1,551 J/1k)"
    assert _unchecked(text, [31.1, 1182.6, 1550.9]) == ["20"]
    assert _unchecked(text.replace("20%", "31%"), [31.1, 1182.6, 1550.9]) == []
