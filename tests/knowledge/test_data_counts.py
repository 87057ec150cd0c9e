"""ecoguard.knowledge.data_counts: the compiled counts beside the study's published ones."""

from __future__ import annotations

import json
from pathlib import Path

from ecoguard.cli import main
from ecoguard.knowledge import DataCounts, data_counts
from ecoguard.knowledge.tables import _shipped_rows

REPO = Path(__file__).resolve().parents[2]
SKILL = (
    REPO / "data" / "upstream" / "ecocompute-dynamic-eval" / "skills" / "ecocompute" / "SKILL.md"
)


def _raw_rows() -> list[dict]:
    return json.loads((REPO / "data" / "reference_rows.json").read_text(encoding="utf-8"))["rows"]


def test_counts_recomputed_from_the_compiled_file():
    raw = _raw_rows()
    counts = data_counts()
    assert isinstance(counts, DataCounts)
    assert counts.rows == len(raw) == len(_shipped_rows())
    configs = {(r["gpu"], r["model_key"], r["precision"], r["batch_size"] or 1) for r in raw}
    assert counts.configurations == len(configs) < counts.rows
    assert counts.anchor_copies == sum(r["scope"] == "duplicate" for r in raw) > 0
    assert counts.offloaded_rows == sum(bool(r.get("offloaded")) for r in raw)
    assert counts.quoted_copies == sum(bool(r.get("quotes")) for r in raw)
    used = {
        (r["gpu"], r["model_key"], r["precision"], r["batch_size"] or 1)
        for r in raw
        if r["scope"] == "end_to_end"
        and r["energy_j_per_1k"] is not None
        and not r.get("offloaded")
    }
    assert counts.estimator_configurations == len(used)
    t4 = [r for r in raw if r["gpu"] == "tesla_t4"]
    assert counts.t4_rows == len(t4)
    assert counts.t4_configurations == len(
        {(r["model_key"], r["precision"], r["batch_size"]) for r in t4}
    )
    assert sum(counts.configurations_by_gpu.values()) == counts.configurations


def test_published_counts_are_the_studys_own_words():
    published = data_counts().published
    text = SKILL.read_text(encoding="utf-8")
    assert published.claim in text
    assert published.claim.startswith(f"{published.configurations_claimed}+ configurations")
    assert (published.primary, published.tesla_t4, published.supplementary) == (113, 140, 107)
    assert published.primary + published.tesla_t4 + published.supplementary == 360
    assert published.formula_generated_rows == 560


def test_notes_reconcile_rows_configurations_and_the_study():
    counts = data_counts()
    text = " ".join(counts.notes)
    assert f"{counts.rows} rows are {counts.configurations} configurations" in text
    assert "360+ configurations (113 primary + 140 Tesla T4 + 107 supplementary)" in text
    assert f"are {counts.t4_configurations} configurations" in text
    assert "560-row ecocompute_benchmark_dataset.json is left out" in text
    assert f"{counts.anchor_copies} anchor copies" in text


def test_cli_data_shows_the_reconciliation(capsys):
    assert main(["data", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["study"] == json.loads(json.dumps(data_counts().to_dict()))
    assert payload["study"]["published"]["tesla_t4"] == 140
    assert main(["data"]) == 0
    out = capsys.readouterr().out
    assert "360+ configurations" in out and "140 Tesla T4" in out
    assert f"{data_counts().configurations} configurations" in out
