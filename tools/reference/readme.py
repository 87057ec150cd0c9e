"""``data/README.md`` rendered from the rows: counts, treatment, the study's own counts and the
known disagreements between sources, every figure taken from the rows."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from reference.normalise import BS_SWEEP_RAW, BS_SWEEP_SUMMARY, EXCLUDED, YI9B_INT8_PPL_FILES, Row
from reference.treatment import SAME_RUN_ENERGY_J


def check_sweep_summary(src: Path, rows: list[Row]) -> list[str]:
    """Compare our per-BS means with the published summary CSV; return disagreements."""
    problems = []
    lines = (src / BS_SWEEP_SUMMARY).read_text().splitlines()[3:]
    by_bs = {r.batch_size: r for r in rows if r.source == BS_SWEEP_RAW}
    for line in lines:
        cells = line.split(",")
        bs, per_req = int(cells[0]), float(cells[7])
        ours = by_bs[bs].energy_j_per_request
        if ours is None or abs(round(ours, 2) - per_req) > 0.011:
            problems.append(f"BS {bs}: summary {per_req} J/request vs raw mean {ours}")
    return problems


def counts_table(rows: list[Row]) -> list[tuple[str, str, str, int]]:
    counter = Counter((r.gpu, r.precision, r.tier) for r in rows)
    return sorted((g, p, t, n) for (g, p, t), n in counter.items())


def _by_id(rows: list[Row]) -> dict[str, Row]:
    return {r.id: r for r in rows}


def _pct(value: float) -> str:
    return f"{value:+.1f}%"


def _pct_range(values: list[float]) -> str:
    low, high = _pct(min(values)), _pct(max(values))
    return low if low == high else f"{low} to {high}"


def _joules(value: float) -> str:
    return f"{value:,.0f}"


def _stated(row: Row) -> float:
    """The energy as the source printed it (before any idle correction)."""
    return (
        row.energy_j_per_1k_stated
        if row.energy_j_per_1k_stated is not None
        else row.energy_j_per_1k
    )


def _stated_delta(row: Row, rows: dict[str, Row]) -> float:
    """The change vs FP16 on the source's own basis (stated energies)."""
    base = rows[row.baseline_row]
    return (_stated(row) / _stated(base) - 1.0) * 100.0


def treatment_sections(rows: list[Row]) -> list[str]:
    """Which rows ecoguard re-tiered, corrected for idle power or kept apart, row by row."""
    quoted = sorted(r.id for r in rows if r.tier == "reported" and not r.source.endswith(".md"))
    corrected = sorted((r for r in rows if r.idle_added_w is not None), key=lambda r: r.id)
    kept_apart = sorted(r.id for r in rows if r.scope == "idle_subtracted")
    idles = [r.idle_added_w for r in corrected]
    lines = [
        "## Tiers, sizes and idle power: what ecoguard changed",
        "",
        f"* Tier `reported` although the row is in a data file ({len(quoted)} rows): "
        "`pure_int8_metadata.json` quotes its FP16 and default-INT8 figures from the unpublished",
        "  2026-02-12 run (`rtx4090d_clean.csv` was never published); the memo prints the same",
        "  figures as prose. " + ", ".join(f"`{i}`" for i in quoted) + ".",
        "* `params_b` is the registry's size (`models.json`) for every row whose model it lists",
        "  (all of them); the sources print rounded sizes (7B for Qwen2-7B's 7.62B).",
        "* Idle power. The RTX 4090D memo and `pure_int8_metadata.json` state energy = (average",
        "  power - idle power) x 1000 / throughput; every row of theirs with power, throughput and",
        "  energy confirms it (the idle power they imply is "
        f"{min(idles):.2f}-{max(idles):.2f} W). The v2.3 RTX 4090D tables",
        "  take their deltas against the memo's idle-subtracted FP16 baselines, and the Yi-1.5-6B",
        "  perplexity CSV quotes deltas from the same study, so they are on that basis too.",
        f"  * Corrected ({len(corrected)} rows, scope `end_to_end`): energy = stated + idle x 1000 /",
        "    throughput, with the row's own idle where it prints power, else the idle of the row",
        "    that printed the same energy and throughput; deltas recomputed on the corrected",
        "    energies (the note keeps the stated figures):",
    ]
    lines += [
        f"    `{r.id}` ({r.idle_added_w:.2f} W, {_joules(_stated(r))} -> "
        f"{_joules(r.energy_j_per_1k)} J/1k)"
        for r in corrected
    ]
    lines += [
        f"  * Kept apart ({len(kept_apart)} rows, scope `idle_subtracted`: no power column and no",
        "    identical row to recover the idle from, or no energy at all):",
        "    " + ", ".join(f"`{i}`" for i in kept_apart) + ".",
        "  * RTX PRO 6000 phase rows are decode-phase energies with the file's idle subtracted",
        "    (scope `decode_active`, not corrected: the phase split is their point).",
        "  * Every other row includes idle: where a row gives power, throughput and energy, energy",
        "    equals power x 1000 / throughput within "
        f"{_max_energy_mismatch_pct(rows):.1f}% (means of runs vs ratio of means).",
        *_quote_and_offload_lines(rows),
        "",
    ]
    return lines


def _study_count_lines(rows: list[Row], published: dict) -> list[str]:
    """How these rows relate to the study's own count ("360+ configurations ...")."""
    configs = {(r.gpu, r.model_key, r.precision, r.batch_size or 1) for r in rows}
    t4 = {c for c in configs if c[0] == "tesla_t4"}
    return [
        f"The study claims {published['claim']} (`{published['source']}`). These "
        f"{len(rows)} rows are {len(configs)} configurations (a row is one configuration as one",
        "file prints it); the study's Tesla T4 configurations are in no published data file "
        f"(here: {len(t4)}),",
        f"and its {published['formula_generated_rows']}-row formula-generated dataset is left "
        "out. `ecoguard data` (and `ecoguard.knowledge.data_counts()`) sets the counts side by side.",
        "",
    ]


def _quote_and_offload_lines(rows: list[Row]) -> list[str]:
    """The rows that quote another document's run, and the rows that ran offloaded."""
    quotes = sorted((r for r in rows if r.quotes), key=lambda r: r.id)
    offloaded = sorted((r for r in rows if r.offloaded), key=lambda r: r.id)
    by_session: dict[str, list[str]] = {}
    for r in quotes:
        by_session.setdefault(r.quotes, []).append(r.id)
    lines = [
        f"* One run, one session ({len(quotes)} rows, field `quotes`): a row that prints the same",
        "  configuration with the same figures as another document (energy within "
        f"{SAME_RUN_ENERGY_J:g} J/1k,",
        "  throughput where both give one) counts as that document's session, not a session of",
        "  its own. A file never quotes itself; two data files dated differently are two runs.",
    ]
    lines += [
        f"  * `{session}`: " + ", ".join(f"`{i}`" for i in ids)
        for session, ids in sorted(by_session.items())
    ]
    lines += [
        f"* Offloaded ({len(offloaded)} row{'s' if len(offloaded) != 1 else ''}, field "
        "`offloaded`): the configuration needs more than the GPU's memory by the",
        "  `vram-overflow` rule's model (`ecoguard.knowledge.memory`; an unstated prompt length",
        "  counts as 0 tokens), so the run offloaded weights to the CPU. Kept, shown with the",
        "  flag, and left out of every fit, ratio and carry:",
    ]
    lines += [f"  `{r.id}` ({r.note.rsplit('; ', 1)[-1]})" for r in offloaded]
    return lines


def _max_energy_mismatch_pct(rows: list[Row]) -> float:
    worst = 0.0
    for r in rows:
        if r.scope != "end_to_end" or None in (r.power_w, r.throughput_tok_s, r.energy_j_per_1k):
            continue
        implied = r.power_w * 1000.0 / r.throughput_tok_s
        worst = max(worst, abs(implied / r.energy_j_per_1k - 1.0) * 100.0)
    return worst


def fp16_baseline_spread(rows: list[Row], gpu: str) -> tuple[str, float, float, float]:
    """The model whose FP16 baselines on ``gpu`` differ most between sessions: (model key,
    lowest, highest J/1k, spread %). Baselines are the FP16 rows and the FP16 energies that
    quantized rows without an FP16 row of their own (the anchors) carry."""
    energies: dict[str, set[float]] = {}
    for r in rows:
        if r.gpu != gpu or r.scope != "end_to_end" or r.tier != "measured":
            continue
        if r.precision == "fp16" and r.energy_j_per_1k is not None:
            energies.setdefault(r.model_key, set()).add(round(r.energy_j_per_1k, 2))
        elif r.baseline_row is None and r.fp16_energy_j_per_1k is not None:
            energies.setdefault(r.model_key, set()).add(round(r.fp16_energy_j_per_1k, 2))
    key = max(energies, key=lambda k: max(energies[k]) / min(energies[k]))
    low, high = min(energies[key]), max(energies[key])
    return key, low, high, (high / low - 1.0) * 100.0


def _deltas(rows: list[Row], pred) -> list[float]:
    return [r.delta_vs_fp16_pct for r in rows if pred(r) and r.delta_vs_fp16_pct is not None]


def _sweep_lines(rows: list[Row], by_id: dict[str, Row], sweep_problems: list[str]) -> list[str]:
    """The A800 batch sweep, prose against raw, and the A800 BS 1 pure-INT8 figures."""
    guide1 = by_id["a800/mistral-7b/int8_pure/bs1/bsguide-prose"]
    guide64 = by_id["a800/mistral-7b/int8_pure/bs64/bsguide-prose"]
    sweep1 = next(r for r in rows if r.source == BS_SWEEP_RAW and r.batch_size == 1)
    sweep64 = next(r for r in rows if r.source == BS_SWEEP_RAW and r.batch_size == 64)
    drop_raw = (sweep64.energy_j_per_request / sweep1.energy_j_per_request - 1.0) * 100.0
    drop_prose = (guide64.energy_j_per_request / guide1.energy_j_per_request - 1.0) * 100.0
    a800_json = by_id["a800/mistral-7b/int8_pure/bs1/ecai-a800json"]
    a800_quick = by_id["a800/mistral-7b/int8_pure/bs1/dyn-a800meta"]
    return [
        "* A800 batch sweep: the prose `batch_size_guide.md` gives "
        f"{guide1.energy_j_per_request:g} J/request and {_joules(guide1.energy_j_per_1k)} J/1k at",
        f"  BS 1 (and {guide64.energy_j_per_request:g} J/request at BS 64); the raw CSV gives "
        f"{sweep1.energy_j_per_request:.1f} J/request and {sweep1.energy_j_per_1k:.1f} J/1k at BS 1",
        f"  and {sweep64.energy_j_per_request:.2f} J/request at BS 64. The relative drop agrees "
        f"({_pct(drop_prose)} prose, {_pct(drop_raw)} raw); the absolute values do not",
        "  (the prose J/request looks divided by the token count and its BS 1 row is the Feb-13 quick",
        "  study's). Raw means recomputed here "
        + (
            "match the published summary CSV."
            if not sweep_problems
            else "differ from the summary: " + "; ".join(sweep_problems)
        ),
        f"* A800 BS 1 pure INT8: {a800_json.energy_j_per_1k:.0f} J/1k ({a800_json.n_runs} runs, up to "
        "512 tokens, `energy_mistral_7b_int8_pure.json`)",
        f"  vs {a800_quick.energy_j_per_1k:.0f} J/1k ({a800_quick.n_runs} runs, "
        f"{a800_quick.generation_tokens} tokens, `a800_metadata.json`) vs "
        f"{sweep1.energy_j_per_1k:.0f} J/1k (sweep, {sweep1.prompt_tokens}+"
        f"{sweep1.generation_tokens} tokens).",
    ]


def _a800_file_lines(src: Path) -> list[str]:
    """What two A800 files say differently: the GPU's description, Yi-1.5-9B's perplexity."""
    a800_hw = json.loads((src / "ecocompute-dynamic-eval/metadata/a800_metadata.json").read_text())
    a800_gpu = a800_hw["hardware"]["gpu"]
    ppl_used, ppl_other = (
        json.loads((src / "ecocompute-ai/data/a800_results" / name).read_text())["results"][
            "perplexity"
        ]
        for name in YI9B_INT8_PPL_FILES
    )
    return [
        f"* `a800_metadata.json` describes its GPU as {a800_gpu['full_name']} with "
        f"{a800_gpu['vram']} and {a800_gpu['tdp']}; every other",
        "  A800 file says A800-SXM4-80GB.",
        f"* Yi-1.5-9B int8_default perplexity on A800: {ppl_used:g} (`{YI9B_INT8_PPL_FILES[0]}`, "
        "used by",
        f"  the summary) vs {ppl_other:g} (`{YI9B_INT8_PPL_FILES[1]}`).",
    ]


def _4090d_lines(by_id: dict[str, Row]) -> list[str]:
    """The RTX 4090D memo against the v2.3 prose, as printed (idle subtracted)."""
    memo_yi_nf4 = by_id["rtx4090d/yi-1.5-6b/nf4/bs1/memo-prose"]
    v23_yi_nf4 = by_id["rtx4090d/yi-1.5-6b/nf4/bs1/v23-prose/nf4"]
    memo_phi = by_id["rtx4090d/phi-3-mini/fp16/bs1/memo-prose"]
    v23_phi = by_id["rtx4090d/phi-3-mini/fp16/bs1/v23-prose/nf4"]
    memo_phi_nf4 = by_id["rtx4090d/phi-3-mini/nf4/bs1/memo-prose"]
    v23_phi_nf4 = by_id["rtx4090d/phi-3-mini/nf4/bs1/v23-prose/nf4"]
    memo_qwen = by_id["rtx4090d/qwen2.5-7b/fp16/bs1/memo-prose"]
    v23_qwen = by_id["rtx4090d/qwen2.5-7b/fp16/bs1/v23-prose/nf4"]
    return [
        "* RTX 4090D, as printed (idle subtracted): the memo gives Yi-1.5-6B NF4 "
        f"{memo_yi_nf4.throughput_tok_s:g} tok/s, {_joules(_stated(memo_yi_nf4))} J/1k "
        f"({_pct(_stated_delta(memo_yi_nf4, by_id))})",
        f"  and Qwen2.5-7B FP16 {_joules(_stated(memo_qwen))} J/1k; the v2.3 prose gives "
        f"{v23_yi_nf4.throughput_tok_s:g} tok/s, {_joules(_stated(v23_yi_nf4))} J/1k "
        f"({_pct(_stated_delta(v23_yi_nf4, by_id))}) and {_joules(_stated(v23_qwen))} J/1k.",
        f"  Phi-3-mini FP16 is {_joules(_stated(memo_phi))} J/1k (memo) vs "
        f"{_joules(_stated(v23_phi))} J/1k (v2.3); NF4 delta "
        f"{_pct(_stated_delta(memo_phi_nf4, by_id))} vs {_pct(_stated_delta(v23_phi_nf4, by_id))}.",
    ]


def _5090_nf4_lines(rows: list[Row], by_id: dict[str, Row]) -> list[str]:
    """RTX 5090 NF4: Qwen2-1.5B CSV against prose, and the change at 7B in three studies."""
    csv_q15 = by_id["rtx5090/qwen2-1.5b/nf4/bs1/ecai-5090csv"]
    v23_q15 = by_id["rtx5090/qwen2-1.5b/nf4/bs1/v23-prose/earlier"]
    jan_7b = by_id["rtx5090/qwen2-7b/nf4/bs1/ecai-5090csv"]
    v23_7b = by_id["rtx5090/qwen2.5-7b/nf4/bs1/v23-prose"]
    sep_7b = _deltas(
        rows,
        lambda r: (
            r.source.endswith("rtx5090_bnb_2026-09-20.csv")
            and r.model_key == "qwen2-7b"
            and r.precision == "nf4"
        ),
    )
    return [
        f"* RTX 5090 Qwen2-1.5B NF4: {csv_q15.energy_j_per_1k:,.2f} J/1k (CSV) vs "
        f"{_joules(v23_q15.energy_j_per_1k)} (v2.3 prose).",
        f"* RTX 5090 NF4 at 7B: {_pct(jan_7b.delta_vs_fp16_pct)} (Jan study CSV, Qwen2-7B, "
        f"{jan_7b.generation_tokens} tokens) vs {_pct_range(sep_7b)}",
        "  (Sep 2026 bnb sessions, Qwen2-7B, 10 x 256 tokens, bnb 0.50.2) vs "
        f"{_pct(v23_7b.delta_vs_fp16_pct)} (v2.3 prose, Qwen2.5-7B).",
    ]


def _4090_lines(rows: list[Row]) -> list[str]:
    """RTX 4090: INT8's change across sessions, the FP16 baselines' spread, NF4 at 3B."""

    def int8_4090(tag: str, small: bool) -> list[float]:
        return _deltas(
            rows,
            lambda r: (
                r.gpu == "rtx4090"
                and r.precision == "int8_mixed"
                and f"/{tag}" in r.id
                and (r.model_key != "qwen2-7b") is small
            ),
        )

    paired_7b = int8_4090("qe-4090paired", False)
    repeats_7b = int8_4090("qe-4090rep", False)
    anchor_7b = int8_4090("qe-anchor", False)
    small_int8 = int8_4090("qe-4090paired", True) + int8_4090("qe-4090rep", True)
    spread_key, spread_lo, spread_hi, spread_pct = fp16_baseline_spread(rows, "rtx4090")
    paired_3b = _deltas(rows, lambda r: r.id == "rtx4090/qwen2.5-3b/nf4/bs1/qe-4090paired")
    cards_3b = _deltas(
        rows, lambda r: r.source.endswith("rtx4090_bnb_2026-09-25.csv") and r.precision == "nf4"
    )
    return [
        f"* RTX 4090 INT8 (LLM.int8()) vs FP16 at Qwen2-7B: {_pct_range(paired_7b)} (paired "
        f"2026-08-19) vs {_pct_range(repeats_7b)} (repeats)",
        f"  vs {_pct_range(anchor_7b)} (anchors, July 2026 mlcube); the smaller models "
        f"{_pct_range(small_int8)} (paired and repeats).",
        f"  The FP16 baselines of one size differ by up to {spread_pct:.0f}% between sessions",
        f"  ({spread_key} {_joules(spread_lo)} to {_joules(spread_hi)} J/1k).",
        f"* RTX 4090 Qwen2.5-3B NF4: {_pct_range(paired_3b)} (paired 2026-08-19) vs "
        f"{_pct_range(cards_3b)} (2026-09-25, two cards).",
    ]


def disagreement_section(rows: list[Row], src: Path, sweep_problems: list[str]) -> list[str]:
    """Where the sources disagree with each other, with every figure taken from the rows."""
    by_id = _by_id(rows)
    fp8_v23 = _deltas(rows, lambda r: r.precision == "fp8_weight_only" and r.tier == "reported")
    fp8_qe = _deltas(rows, lambda r: r.precision == "fp8_weight_only" and r.tier == "measured")
    return [
        "## Known disagreements (both rows kept; the estimator prefers measured)",
        "",
        *_sweep_lines(rows, by_id, sweep_problems),
        *_a800_file_lines(src),
        *_4090d_lines(by_id),
        *_5090_nf4_lines(rows, by_id),
        *_4090_lines(rows),
        f"* FP8 weight-only on RTX 5090: {_pct_range(fp8_v23)} (v2.3, torchao 0.17 nightly) vs "
        f"{_pct_range(fp8_qe)}",
        "  (torchao 0.18.0, 2026-09-20). Both eager mode.",
        "",
    ]


# The README's fixed text above the counts: what it is, attribution and licences, the files and
# the row schema.
README_HEAD = (
    "# ecoguard reference data",
    "",
    "Compiled by `tools/build_reference.py` from `data/upstream/` (byte-exact copies of the",
    "EcoCompute files the script reads; provenance, commits, checksums and licences in",
    "`data/upstream/PROVENANCE.md`). Do not edit `reference_rows.json` or this file by hand:",
    "change the script and rebuild (`python tools/build_reference.py`). A test rebuilds both and",
    "compares; `tests/knowledge/test_data_claims.py` recomputes the figures of the counts,",
    "changes and disagreements sections below from the rows.",
    "",
    "## Attribution and licences",
    "",
    "Figures come from **Hongping Zhang, EcoCompute (2026)**, Zenodo",
    "[10.5281/zenodo.19647290](https://doi.org/10.5281/zenodo.19647290), CC BY 4.0. Repositories",
    "and the licence each states (statements conflict in places; none checked by a lawyer):",
    "",
    "| repository | licence as stated |",
    "|---|---|",
    "| github.com/hongping-zh/ecocompute-ai | LICENSE file CC BY 4.0 (README badge and data/README say MIT) |",
    "| github.com/hongping-zh/ecocompute-dynamic-eval | MIT |",
    "| github.com/hongping-zh/quant-energy | no LICENSE file; data stated CC BY 4.0 |",
    "| github.com/hongping-zh/hongping-zh.github.io | MIT |",
    "| ecocompute skill v2.3.0 text (repository unknown, via a search index) | points at the CC BY 4.0 Zenodo data |",
    "",
    "ecoguard's rows carry numbers, not prose or code: every row names its source file. The",
    "vendored source files under `upstream/` are redistributed unchanged under the licences",
    "above, for rebuilding only (the wheel does not ship them).",
    "",
    "## Files",
    "",
    "* `reference_rows.json`: `{schema_version, rows: [...]}`, one row per configuration and source.",
    "* `gpus.json`, `models.json`, `regions.json`, `equivalents.json`, `gpu_cards.json`:",
    "  hand-maintained knowledge tables (GPU profiles with NVML aliases, model registry, grid",
    "  price/intensity, real-world equivalents, NVIDIA cards outside the profiles from their",
    "  vendor specification sheets and accelerator vendors with no reference row); every entry",
    "  names its source.",
    "",
    "## Row schema and units",
    "",
    "| field | meaning |",
    "|---|---|",
    "| `id` | stable id `gpu/model_key/precision/bsN/source-tag[/session]` |",
    "| `gpu` | ecoguard GPU profile key (`gpus.json`) |",
    "| `model_id`, `model_key`, `params_b` | model as the source names it; registry key; billions of parameters from the registry (`models.json`), not the rounded size the source prints |",
    "| `precision` | `fp16`, `nf4`, `nf4_dq`, `int8_mixed` (bitsandbytes LLM.int8() default threshold 6.0), `int8_pure` (threshold 0.0), `fp8_weight_only`, `fp8_dynamic` (torchao) |",
    "| `batch_size`, `prompt_tokens`, `generation_tokens` | sequences per generate call; prompt and new tokens per sequence (null when the source does not say) |",
    "| `throughput_tok_s`, `throughput_std` | generated tokens per second over the whole batch (mean, std) |",
    "| `power_w`, `power_std` | average board power during generation, W |",
    "| `energy_j_per_1k`, `energy_j_per_1k_std` | joules per 1000 generated tokens |",
    "| `energy_j_per_request`, `energy_j_per_request_std` | joules per request (sequence), where the source gives it |",
    "| `n_runs`, `cv_pct` | runs (or iterations) behind the mean; coefficient of variation of energy, % |",
    "| `perplexity` | WikiText-2 perplexity where measured (setups differ per source) |",
    "| `fp16_energy_j_per_1k`, `delta_vs_fp16_pct`, `baseline_row` | the FP16 baseline the source pairs the row with (same session where the file has one) and the energy change vs it, % |",
    "| `software`, `date` | stack and date as recorded |",
    "| `tier` | `measured` (raw or summary data file with runs) or `reported` (publisher's prose table only, or a data file quoting a run whose own file was never published) |",
    "| `scope` | `end_to_end` (whole generate call, idle power included), `idle_subtracted` (the source subtracted idle power and the row cannot be corrected: never paired with `end_to_end` rows), `decode_active` (decode phase with idle subtracted: not comparable), `duplicate` (an anchor row repeating another file's row) |",
    "| `idle_added_w`, `energy_j_per_1k_stated` | set only where ecoguard added back idle power the source had subtracted: watts added, and the energy as printed (`energy_j_per_1k` = stated + idle_added_w x 1000 / throughput_tok_s) |",
    "| `source`, `session`, `note` | file relative to `data/upstream/`; session/replicate; caveats |",
    "| `offloaded`, `quotes` | the run needed more than the GPU's memory (kept out of every fit); the session whose run this row quotes |",
    "",
)


# What is not read, and why.
EXCLUDED_LINES = (
    "## Excluded",
    "",
    f"* `{EXCLUDED}` (560 rows): its values follow an exact multiplicative formula",
    "  (throughput identical across GPUs, energy breakdown constant per precision), so it is",
    "  generated, not measured. It is never a reference.",
    "* Templates (`community_*`), JSON schemas, the mlcube illustrative/no-GPU examples (labelled",
    "  synthetic or interpolated), `curves.json` and `coverage_matrix` (fits and roll-ups of rows",
    "  already here), `gpus_addition.csv` (unverified spec values), `uncertainty_report` and the",
    "  other summary CSVs (roll-ups). Of the summaries only `a800_summary.csv` (the A800",
    "  perplexities, and a check of our means) and the batch-sweep summary (a check) are read.",
    "",
)


def render_readme(rows: list[Row], src: Path) -> str:
    counts = counts_table(rows)
    tiers = Counter(r.tier for r in rows)
    scopes = Counter(r.scope for r in rows)
    sources = Counter(r.source for r in rows)
    sweep_problems = check_sweep_summary(src, rows)
    lines = [
        *README_HEAD,
        f"## Counts ({len(rows)} rows: "
        + ", ".join(f"{n} {t}" for t, n in sorted(tiers.items()))
        + ")",
        "",
        "Scopes: " + ", ".join(f"{n} {s}" for s, n in sorted(scopes.items())) + ".",
        "",
        *_study_count_lines(rows, published_counts(src)),
        "| GPU | precision | tier | rows |",
        "|---|---|---|---|",
    ]
    lines += [f"| {g} | {p} | {t} | {n} |" for g, p, t, n in counts]
    lines += [
        "",
        "## Rows per source file",
        "",
        "| source | rows |",
        "|---|---|",
    ]
    lines += [f"| `{s}` | {n} |" for s, n in sorted(sources.items())]
    lines += [
        "",
        *EXCLUDED_LINES,
        *treatment_sections(rows),
        *disagreement_section(rows, src, sweep_problems),
    ]
    return "\n".join(lines)


SKILL = "ecocompute-dynamic-eval/skills/ecocompute/SKILL.md"
STUDY_CLAIM = re.compile(
    r"(\d+)\+ configurations \((\d+) primary \+ (\d+) Tesla T4 \+ (\d+) supplementary\)"
)
# The formula-generated dataset (not vendored, never read): its row count as data/README says.
EXCLUDED_ROWS = 560


def published_counts(src: Path) -> dict:
    """The study's own counts as its skill text prints them ("360+ configurations (113 primary
    + 140 Tesla T4 + 107 supplementary)"), with the file and line quoted, and the row count of
    the formula-generated dataset ecoguard leaves out."""
    text = (src / SKILL).read_text(encoding="utf-8")
    match = STUDY_CLAIM.search(text)
    if match is None:
        raise SystemExit(f"build_reference: the study's count claim is missing from {SKILL}")
    total, primary, t4, supplementary = (int(g) for g in match.groups())
    return {
        "claim": match.group(0),
        "source": SKILL,
        "configurations_claimed": total,
        "primary": primary,
        "tesla_t4": t4,
        "supplementary": supplementary,
        "formula_generated_rows": EXCLUDED_ROWS,
        "formula_generated_source": EXCLUDED,
    }
