"""Fixtures for the audit tests: the corpus, its expected findings, and a helper that turns a
result into (rule, line[, cell]) tuples per file, the form of ``expected.py``."""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CORPUS = HERE / "corpus"


def _load_expected():
    # tests/ is not a package, so the table is loaded by path rather than imported.
    spec = importlib.util.spec_from_file_location("ecoguard_audit_expected", HERE / "expected.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXPECTED = _load_expected()


def by_file(result) -> dict[str, list[tuple]]:
    """file name -> sorted [(rule or note kind, line) or (..., line, cell)]."""
    table: dict[str, list[tuple]] = defaultdict(list)
    for item in (*result.findings, *result.notes):
        location = item.location
        rule = getattr(item, "rule", None) or item.kind
        if location.cell is None:
            entry: tuple = (rule, location.line)
        else:
            entry = (rule, location.line, location.cell)
        table[Path(location.path).name].append(entry)
    return {name: sorted(entries) for name, entries in table.items()}


@pytest.fixture
def corpus() -> Path:
    return CORPUS


@pytest.fixture
def expected():
    return EXPECTED


@pytest.fixture
def findings_by_file():
    return by_file


@pytest.fixture
def sarif_schema() -> dict:
    import json

    return json.loads((HERE / "sarif-2.1.0-subset.schema.json").read_text())


def corpus_scores(found_tables: list[dict], expected_tables: list[dict]) -> dict[str, object]:
    """Precision and recall of the audit against the hand labels: each expected (rule, line)
    found is a true positive, each one missed a false negative, each extra finding or note a
    false positive (compared as multisets, file by file, over every table given)."""
    from collections import Counter

    per_rule: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # [tp, fp, fn]
    for found, expected in zip(found_tables, expected_tables, strict=True):
        for name, labels in expected.items():
            want, got = Counter(labels), Counter(found.get(name, []))
            for entry in set(want) | set(got):
                hit = min(want[entry], got[entry])
                counts = per_rule[entry[0]]
                counts[0] += hit
                counts[1] += got[entry] - hit
                counts[2] += want[entry] - hit
    true_pos, false_pos, false_neg = (sum(c[i] for c in per_rule.values()) for i in range(3))
    precision = true_pos / (true_pos + false_pos) if true_pos + false_pos else 1.0
    recall = true_pos / (true_pos + false_neg) if true_pos + false_neg else 1.0
    return {
        "precision": precision,
        "recall": recall,
        "true_positives": true_pos,
        "false_positives": false_pos,
        "false_negatives": false_neg,
        "per_rule": {rule: tuple(counts) for rule, counts in sorted(per_rule.items())},
    }


@pytest.fixture
def scores():
    return corpus_scores
