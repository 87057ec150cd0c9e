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
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ecoguard.knowledge import evidence as evidence_module  # noqa: E402
from ecoguard.knowledge import ladder, validation  # noqa: E402

OUT = REPO / "data" / "estimator_validation.json"
DOCS = (REPO / "README.md", REPO / "docs" / "knowledge.md")
START, END = "<!-- validation:start -->", "<!-- validation:end -->"
SCORES = ("answered", "median_abs_error_pct", "p90_abs_error_pct")
# Each alternative to the shipped ladder.Choices, flipped alone: its name in the JSON and docs.
ALTERNATIVES = {
    "inverse ratio before size": replace(ladder.SHIPPED, size_before_inverse=False),
    "ratio held 2x (as sizes)": replace(ladder.SHIPPED, ratio_hold=2.0),
    "two-nearest-sizes slope": replace(ladder.SHIPPED, ols_extrapolation=False),
}


@contextmanager
def choices(chosen: ladder.Choices) -> Iterator[None]:
    """Score with ``chosen`` (the ladder's memo lives on the cached evidence: both reset)."""
    shipped = ladder.CHOICES
    ladder.CHOICES = chosen
    evidence_module._cache.clear()
    try:
        yield
    finally:
        ladder.CHOICES = shipped
        evidence_module._cache.clear()


def scores(mode: str) -> dict:
    s = validation.summary(validation.holdout_points(mode), mode)
    return {k: s[k] for k in SCORES}


def carrier_comparison() -> dict:
    out = {}
    for carrier in ladder.CARRIERS:
        with choices(replace(ladder.SHIPPED, carrier=carrier)):
            out[carrier] = scores("gpu")
    return out


def choice_comparison() -> dict:
    out = {}
    for name, alternative in ALTERNATIVES.items():
        with choices(alternative):
            out[name] = {mode: scores(mode) for mode in validation.MODES}
    return out


def render() -> str:
    table = validation.validate()
    table["carriers"] = carrier_comparison()
    table["carrier_chosen"] = ladder.SHIPPED.carrier
    table["choices"] = choice_comparison()
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
    lines += ["", "| method | n | median abs error | p90 abs error |", "|---|---|---|---|"]
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
    ]
    return "\n".join(lines)


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
