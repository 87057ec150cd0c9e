"""Hostile round 3 (issue 29): the local dataset file, the ledger path, the text report.

Each test is one probe of the round that used to hang, crash or mislead; the property is the one
the issue names for its class (a bad input costs itself, never the process or other records)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ecoguard.faults import fault_counts
from ecoguard.knowledge import tables


@pytest.fixture
def local_file(tmp_path, monkeypatch):
    path = tmp_path / "local_rows.jsonl"
    monkeypatch.setenv(tables.LOCAL_DATA_ENV, str(path))
    monkeypatch.setattr(tables, "_file_cache", None)
    return path


def _good_row(row_id: str) -> str:
    """A shipped row turned into a local one: every field a real bench row has."""
    row = dict(tables._shipped_rows()[0].to_dict(), id=row_id, tier="local")
    return json.dumps(row)


def test_a_bad_utf8_byte_costs_its_line_not_the_file(local_file):
    local_file.write_bytes(
        (_good_row("a") + "\n").encode()
        + b'{"id": "\xff\xfe"}\n'
        + (_good_row("b") + "\n").encode()
    )
    before = fault_counts().get("knowledge.local_rows", 0)
    rows = tables.read_local_rows(local_file)
    assert sorted(row.id for row in rows) == ["a", "b"]
    assert fault_counts().get("knowledge.local_rows", 0) == before + 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no fifos on this platform")
def test_a_fifo_as_the_local_dataset_is_refused_without_blocking(tmp_path):
    # In a subprocess with a timeout: the old code blocked forever opening the fifo.
    fifo = tmp_path / "rows.fifo"
    os.mkfifo(fifo)
    script = textwrap.dedent(
        """
        import logging
        logging.basicConfig()
        import ecoguard
        from ecoguard.knowledge import tables
        ecoguard.install()
        print("rows", len(tables.reference_rows()) > 0)
        ecoguard.uninstall()
        """
    )
    env = dict(
        os.environ,
        ECOGUARD_LOCAL_DATA=str(fifo),
        ECOGUARD_LEDGER="off",
        ECOGUARD_BACKEND="simulated",
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "rows True" in done.stdout
    assert "not a regular file" in done.stderr


def test_a_device_file_as_the_local_dataset_is_refused(monkeypatch):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    monkeypatch.setenv(tables.LOCAL_DATA_ENV, "/dev/zero")
    monkeypatch.setattr(tables, "_file_cache", None)
    before = fault_counts().get("knowledge.local_rows", 0)
    rows = tables.reference_rows()
    assert rows and all(row.tier != "local" for row in rows)
    assert fault_counts().get("knowledge.local_rows", 0) == before + 1


def test_an_oversized_local_dataset_is_refused(local_file, monkeypatch):
    monkeypatch.setattr(tables, "LOCAL_DATA_MAX_BYTES", 100)
    local_file.write_text("\n".join(_good_row(f"r{i}") for i in range(5)) + "\n")
    assert all(row.tier != "local" for row in tables.reference_rows())
    monkeypatch.setattr(tables, "LOCAL_DATA_MAX_BYTES", 10**6)
    monkeypatch.setattr(tables, "_file_cache", None)
    assert sum(row.tier == "local" for row in tables.reference_rows()) == 5
