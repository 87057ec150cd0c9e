"""`ecoguard report` keeps a model's name when its label is long: the name is at the end of an
id or a path, and cutting the label to its first 28 characters lost it."""

from __future__ import annotations

from ecoguard.export import report as report_mod
from ecoguard.export.report import render_text

LONG = [
    "/home/user/.cache/ecoguard/models/SmolLM2-135M-Instruct",
    "/home/user/.cache/ecoguard/models/SmolLM2-360M-Instruct",
    "Qwen/Qwen2.5-Coder-32B-Instruct-GPTQ-Int4",
]


def _report(keys: list[str]) -> dict:
    summary = report_mod._summary([])
    return {
        "ledger": "ledger.sqlite",
        "since": None,
        "by": "model",
        "note": None,
        "groups": [{"key": key, **summary, "energy_kwh": 0.001} for key in keys],
        "total": summary,
    }


def _table_rows(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("-----")) + 1
    return lines[start : start + len(LONG)]


def test_long_model_labels_keep_their_names_and_stay_apart():
    text = render_text(_report(LONG))
    rows = _table_rows(text)
    labels = [row.split()[0] for row in rows]
    assert len(set(labels)) == len(LONG)  # the first 28 characters made two of them one
    names = ("SmolLM2-135M-Instruct", "SmolLM2-360M-Instruct", LONG[2])
    for label, name in zip(labels, names, strict=True):
        assert label.endswith(name) and len(label) <= 48
    # The table's columns stay aligned: every row is as wide as the others.
    assert len({len(row) for row in rows}) == 1
    bars = text.split("energy per group (kWh)")[1].splitlines()[1:]
    assert [bar.split()[0][-21:] for bar in bars[:2]] == list(names[:2])


def test_short_labels_are_shown_whole_in_the_usual_column():
    keys = ["gpt2", "Qwen/Qwen2.5-7B-Instruct", "x" * 28]
    text = render_text(_report(keys))
    assert [row.split()[0] for row in _table_rows(text)] == keys
    assert "group" + " " * 23 + " " in text  # the 28-character column as before
