#!/usr/bin/env python3
"""Compile the EcoCompute reference material into ecoguard's shipped dataset.

Usage::

    python tools/build_reference.py [SOURCE_DIR] [--out DIR]

SOURCE_DIR defaults to ``$ECOGUARD_REFERENCE_DATA`` or the repository's ``data/upstream/`` (the
vendored copies of exactly the upstream files read here, with their provenance and licences in
``data/upstream/PROVENANCE.md``); ``--out`` defaults to the repository's ``data/``. The script writes
``reference_rows.json`` (one row per measured or reported configuration) and ``README.md``
(schema, units, counts, attribution, known disagreements). The hand-maintained knowledge tables
(``gpus.json``, ``models.json``, ``regions.json``, ``equivalents.json``, ``gpu_cards.json``)
are not touched.

The output is deterministic: rows sorted by id, ids built from the configuration and source,
floats rounded to a fixed number of decimals, no timestamps. A test rebuilds into a temporary
folder and compares byte for byte with the committed files.

Tiers: ``measured`` = a row of a published raw or summary data file (it has a run count);
``reported`` = a figure printed only in the publisher's prose tables, or quoted by a data file
from a run whose own file was never published. The 560-row ``ecocompute_benchmark_dataset.json``
is formula-generated and never read.

Sizes: ``params_b`` is the model registry's (``data/models.json``) wherever the row's model is in
it, so a row and a query for the same model agree on its size (sources round, e.g. 7B for
Qwen2-7B's 7.62B).

Idle power: where a source subtracted idle power from its energies (its protocol says so and the
row's own power, throughput and energy confirm it), the idle energy is added back
(``E + idle_W x 1000 / throughput``) so every ``end_to_end`` row includes idle; rows that cannot
be corrected get scope ``idle_subtracted`` and never pair with idle-inclusive rows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path

# The compiler's modules sit beside this script (tools/reference/); loaded from a test, the
# script's folder is not on the path by itself.
TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

from reference import prose, sources, treatment  # noqa: E402
from reference.normalise import REPO_ROOT, SCHEMA_VERSION, UPSTREAM_DIR, Row  # noqa: E402
from reference.readme import published_counts, render_readme  # noqa: E402
from reference.treatment import SAME_RUN_ENERGY_J  # noqa: E402

__all__ = ["SAME_RUN_ENERGY_J", "Row", "build", "collect", "default_source", "main"]

# The readers: one per upstream file or family of files, in the order their rows are collected.
SOURCES = (
    sources.rows_ecai_bs1_csv,
    sources.rows_a800_json,
    sources.rows_a800_meta,
    sources.rows_pure_int8_meta,
    sources.rows_ppl_4090d,
    sources.rows_bs_sweep,
    sources.rows_qe_anchor,
    sources.rows_qe_paired,
    sources.rows_qe_fp8,
    sources.rows_pro6000_e2e,
    sources.rows_pro6000_phase,
    prose.rows_v23_prose,
    prose.rows_memo_prose,
    prose.rows_bs_guide,
)
# What the build does to the collected rows (sized by the registry first), in this order.
STEPS = (
    treatment.assign_ids,
    treatment.add_back_idle,
    treatment.mark_anchor_duplicates,
    treatment.link_baselines,
    treatment.mark_quotes,
    treatment.mark_offloaded,
)


FLOAT_DIGITS = 4


def row_to_json(row: Row) -> dict:
    data = asdict(row)
    for key, value in data.items():
        if isinstance(value, float):
            if math.isnan(value):
                data[key] = None
            else:
                rounded = round(value, FLOAT_DIGITS)
                data[key] = rounded if rounded != 0 else 0.0
    return data


def collect(src: Path) -> list[Row]:
    rows = [row for reader in SOURCES for row in reader(src)]
    rows = treatment.apply_registry_sizes(rows, treatment.registry_sizes())
    for step in STEPS:
        rows = step(rows)
    return sorted(rows, key=lambda r: r.id)


def build(src: Path, out: Path) -> list[Row]:
    if not src.is_dir():
        raise SystemExit(f"build_reference: source folder {src} not found")
    rows = collect(src)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "schema_version": SCHEMA_VERSION,
        "attribution": "Hongping Zhang, EcoCompute (2026), Zenodo 10.5281/zenodo.19647290, CC BY 4.0",
        "published": published_counts(src),
        "rows": [row_to_json(r) for r in rows],
    }
    text = json.dumps(payload, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    (out / "reference_rows.json").write_text(text, encoding="utf-8")
    (out / "README.md").write_text(render_readme(rows, src), encoding="utf-8")
    return rows


def default_source() -> Path:
    env = os.environ.get("ECOGUARD_REFERENCE_DATA")
    if env:
        return Path(env)
    return UPSTREAM_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", nargs="?", type=Path, default=None, help="reference-data folder")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "data", help="output folder")
    args = parser.parse_args(argv)
    rows = build(args.source or default_source(), args.out)
    tiers = Counter(r.tier for r in rows)
    print(f"wrote {len(rows)} rows ({dict(sorted(tiers.items()))}) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
