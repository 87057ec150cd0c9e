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
