"""Score the estimator by hold-out and write ``data/estimator_validation.json``.

    python tools/validate_estimator.py            # write data/estimator_validation.json
    python tools/validate_estimator.py --check    # exit 1 if the shipped file is stale
    python tools/validate_estimator.py --markdown # print the README/docs table

Writing also refreshes the table between the ``<!-- validation:start -->`` and
``<!-- validation:end -->`` markers of README.md and docs/knowledge.md; ``--check`` checks them.

The file holds, per ladder method, the hold-out error and residual quantiles that every
estimate's interval and confidence are read from, the summaries by hold-out mode, every scored
point, the leave-one-GPU-out error of each cross-GPU carrier considered (the one shipped is
the lowest), and both hold-outs' error with each other design choice of the ladder flipped
alone (``ladder.Choices``). Deterministic: the same rows give the same bytes.

The alternatives live here, not in the package: each is a ``ladder.Choices`` (another rung
order, another carrier, another number) that this tool builds ladders with.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ecoguard.knowledge import ladder, tables, validation  # noqa: E402
from ecoguard.knowledge.evidence import Evidence  # noqa: E402
from ecoguard.knowledge.records import GpuProfile  # noqa: E402

OUT = REPO / "data" / "estimator_validation.json"
DOCS = (REPO / "README.md", REPO / "docs" / "knowledge.md")
START, END = "<!-- validation:start -->", "<!-- validation:end -->"
SCORES = ("answered", "median_abs_error_pct", "p90_abs_error_pct")


def _tdp_bandwidth(_ladder: ladder.Ladder, target: GpuProfile, ref: GpuProfile) -> float:
    return (target.tdp_w / ref.tdp_w) * (ref.mem_bandwidth_gbs / target.mem_bandwidth_gbs)


# The cross-GPU carriers scored beside the shipped (fitted) one: both exponents 1, and J/token
# taken as equal.
CARRIERS = (
    ladder.FITTED,
    ladder.Carrier(
        "tdp-bandwidth", _tdp_bandwidth, lambda _: "(TDP_target/TDP_ref) x (BW_ref/BW_target)"
    ),
    ladder.Carrier(
        "identity", lambda _l, _t, _r: 1.0, lambda _: "1 (J/token taken as equal across GPUs)"
    ),
)
# FP16 by size interpolation before FP16 from a quantized figure and its change (the inverse
# ratio then reads other sizes, so it waits for a size like the size rungs).
SIZE_BEFORE_INVERSE = (
    ladder.EXACT,
    ladder.BATCH,
    ladder.PAIRED_RATIO,
    ladder.SIZE,
    replace(ladder.INVERSE_RATIO, by_size=True),
    ladder.SIZE_RATIO,
)
# Each alternative to the shipped ladder.Choices, flipped alone: its name in the JSON and docs.
ALTERNATIVES = {
    "size before inverse ratio": replace(ladder.SHIPPED, rungs=SIZE_BEFORE_INVERSE),
    "ratio held 2x (as sizes)": replace(ladder.SHIPPED, ratio_hold=2.0),
    "two-nearest-sizes slope": replace(ladder.SHIPPED, ols_extrapolation=False),
}
# The carried figures the envelope is checked on: every GPU profile x registered model x these
# precisions at batch size 1, answered by the cross-GPU rung.
ENVELOPE_PRECISIONS = ("fp16", "int8_mixed", "int8_pure", "nf4")
EXAMPLE_MODEL = "llama-2-7b"


def scores(mode: str, chosen: ladder.Choices) -> dict:
    s = validation.summary(validation.holdout_points(mode, choices=chosen), mode)
    return {k: s[k] for k in SCORES}


def carrier_comparison() -> dict:
    return {
        carrier.name: scores("gpu", replace(ladder.SHIPPED, carrier=carrier))
        for carrier in CARRIERS
    }


def choice_comparison() -> dict:
    return {
        name: {mode: scores(mode, alternative) for mode in validation.MODES}
        for name, alternative in ALTERNATIVES.items()
    }


def _carried_grid(chosen: ladder.Choices) -> dict[tuple[str, str, str], tuple[float, float, float]]:
    """(GPU, model, precision) -> (J/1k, low, high) of every cross-GPU answer on the grid."""
    answers = ladder.Ladder(Evidence(tables._shipped_rows()), chosen)
    out = {}
    for gpu in tables.gpu_profiles().values():
        for model in tables.model_registry().values():
            for precision in ENVELOPE_PRECISIONS:
                query = ladder.Query(gpu, model.id, model.params_b, precision, 1)
                basis = answers.resolve(query)
                if basis is not None and basis.family == "cross-gpu":
                    fig = basis.figure
                    out[(gpu.key, model.id, precision)] = (fig.value, fig.low, fig.high)
    return out


def envelope_effect() -> dict:
    """What the physical envelope changed: the hold-outs without it, and the carried figures
    on the grid it moved (before -> after) or whose band it clipped."""
    unbounded = replace(ladder.SHIPPED, envelope=False)
    without = {mode: scores(mode, unbounded) for mode in validation.MODES}
    before = _carried_grid(unbounded)
    after = _carried_grid(ladder.SHIPPED)
    moved = [
        {
            "gpu": gpu,
            "model": model,
            "precision": precision,
            "before_j_per_1k": round(before[key][0], 1),
            "after_j_per_1k": round(after[key][0], 1),
        }
        for key in sorted(after)
        for gpu, model, precision in (key,)
        if key in before and abs(before[key][0] - after[key][0]) > 1e-6
    ]
    clipped = sum(
        1
        for key in after
        if key in before
        and abs(before[key][0] - after[key][0]) <= 1e-6
        and after[key][1:] != before[key][1:]
    )
    return {
        "holdouts_without": without,
        "carried": len(after),
        "moved": moved,
        "band_clipped": clipped,
    }


def render() -> str:
    table = validation.validate()
    table["carriers"] = carrier_comparison()
    table["carrier_chosen"] = ladder.SHIPPED.carrier.name
    table["choices"] = choice_comparison()
    table["envelope"] = envelope_effect()
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


def markdown(table: dict) -> str:
    lines = [
        "| hold-out | configurations | answered | median abs error | p90 abs error "
        "| p10-p90 coverage | median interval width |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, label in (("config", "leave one configuration out"), ("gpu", "leave one GPU out")):
        s = table["summary"][mode]
        lines.append(
            f"| {label} | {s['configurations']} | {s['answered']} | "
            f"{s['median_abs_error_pct']}% | {s['p90_abs_error_pct']}% | {s['coverage_pct']}% "
            f"| {s['median_width_pct']}% |"
        )
    answered = sum(table["summary"][mode]["answered"] for mode in ("config", "gpu"))
    lines += [
        "",
        f"By the method that answered, both hold-outs together ({answered} answers: each"
        " held-out figure counted once, under its method):",
        "",
        "| method | n | median abs error | p90 abs error |",
        "|---|---|---|---|",
    ]
    for family, m in sorted(table["methods"].items()):
        lines.append(
            f"| {family} | {m['n']} | {m['median_abs_error_pct']}% | {m['p90_abs_error_pct']}% |"
        )
    lines += [
        "",
        "Cross-GPU carrier, leave one GPU out (the shipped one is the lowest median): "
        + "; ".join(
            f"{name} {c['median_abs_error_pct']}% median / {c['p90_abs_error_pct']}% p90"
            + (" (shipped)" if name == table["carrier_chosen"] else "")
            for name, c in sorted(table["carriers"].items())
        )
        + ".",
        "",
        "Each other design choice flipped alone (leave one configuration out; leave one GPU out), "
        "against the shipped "
        + _pair(table["summary"]["config"], table["summary"]["gpu"])
        + ": "
        + "; ".join(
            f"{name} {_pair(c['config'], c['gpu'])}" for name, c in sorted(table["choices"].items())
        )
        + ".",
        "",
        *_envelope_lines(table),
    ]
    return "\n".join(lines)


def _envelope_lines(table: dict) -> list[str]:
    env = table["envelope"]
    moved = env["moved"]
    same = env["holdouts_without"] == {
        mode: {k: table["summary"][mode][k] for k in SCORES} for mode in validation.MODES
    }
    lines = [
        f"Physical envelope (docs/knowledge.md): of {env['carried']} carried figures (every GPU "
        f"x registered model x {', '.join(ENVELOPE_PRECISIONS)}, BS 1), {len(moved)} lay above "
        f"its upper bound and were set to it, and {env['band_clipped']} more had their band "
        "clipped; hold-outs without it: "
        + _pair(env["holdouts_without"]["config"], env["holdouts_without"]["gpu"])
        + (" (the same: no held-out figure crosses a bound)." if same else "."),
    ]
    if moved:
        lines.append("")
    by_gpu: dict[str, list[dict]] = {}
    for m in moved:
        by_gpu.setdefault(m["gpu"], []).append(m)
    for gpu, items in sorted(by_gpu.items()):
        first = next((m for m in items if m["model"] == EXAMPLE_MODEL), items[0])
        lines.append(
            f"* {gpu}: {len(items)} figures, e.g. {first['model']} {first['precision']} "
            f"{first['before_j_per_1k']:,.0f} -> {first['after_j_per_1k']:,.0f} J/1k"
        )
    return lines


def _pair(config: dict, gpu: dict) -> str:
    return (
        f"{config['median_abs_error_pct']}% / {config['p90_abs_error_pct']}% and "
        f"{gpu['median_abs_error_pct']}% / {gpu['p90_abs_error_pct']}% (median / p90)"
    )


def with_table(text: str, table_md: str) -> str:
    """``text`` with the block between the markers replaced (unchanged when it has none)."""
    if START not in text or END not in text:
        return text
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table_md}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the shipped file is stale")
    parser.add_argument("--markdown", action="store_true", help="print the summary tables")
    args = parser.parse_args()
    text = render()
    if args.markdown:
        print(markdown(json.loads(text)))
        return 0
    table_md = markdown(json.loads(text))
    if args.check:
        stale = []
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            stale.append(OUT)
        for doc in DOCS:
            doc_text = doc.read_text(encoding="utf-8")
            if START not in doc_text or with_table(doc_text, table_md) != doc_text:
                stale.append(doc)
        for path in stale:
            print(f"{path} is stale: run python tools/validate_estimator.py", file=sys.stderr)
        return 1 if stale else 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    for doc in DOCS:
        doc_text = doc.read_text(encoding="utf-8")
        updated = with_table(doc_text, table_md)
        if updated != doc_text:
            doc.write_text(updated, encoding="utf-8")
            print(f"updated {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
