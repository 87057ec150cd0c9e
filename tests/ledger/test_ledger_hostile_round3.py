"""Hostile round 3 (issue 29) on the ledger and ``ecoguard report``: a path holding URI
characters, undecodable labels, a lock held past every retry, absurd and malformed rows, and
terminal escapes in model names. Each bad input costs itself, never the rest of the ledger."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ecoguard.cli import main
from ecoguard.config import Settings
from ecoguard.export import ledger as ledger_mod
from ecoguard.export.ledger import Ledger, read_rows, write_records
from ecoguard.export.report import BAD_GPU_NAMES, BAD_TIMESTAMP, build_report, render_text
from tests.ledger.test_ledger import make_record


def _report(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", ["a#b.sqlite", "a?mode=memory.sqlite", "50%.sqlite", "s p.sqlite"])
def test_a_ledger_path_with_uri_characters_reports_that_file(tmp_path, name):
    other = tmp_path / "a"  # what an unescaped "a#b" / "a?..." URI would have opened
    write_records(other, [make_record(0, model="someone-else")])
    path = tmp_path / name
    write_records(path, [make_record(1, model="mine")])
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = _report(["report", "--ledger", str(path), "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert [group["key"] for group in report["groups"]] == ["mine"]
    made = {p.name for p in tmp_path.iterdir()} - set(before)
    assert made <= {name + "-wal", name + "-shm"}  # the ledger's own WAL files, no stray one


def test_a_label_with_an_undecodable_byte_is_kept_not_rejected(tmp_path):
    path = tmp_path / "l.sqlite"
    ledger = Ledger(path).start(subscribe=False)
    try:
        ledger.submit(make_record(0, model="evil\udcff"))
        ledger.submit(make_record(1, model="fine"))
        assert ledger.flush(10.0)
        stats = ledger.stats()
    finally:
        ledger.stop()
    assert stats["written"] == 2 and stats["rejected"] == 0
    models = sorted(row["model_name"] for row in read_rows(path))
    assert models == ["evil\\xff", "fine"]


def test_a_lock_held_past_every_retry_is_recovered_from_later(tmp_path, monkeypatch):
    """Another process holds the write lock longer than all of the batch's retries: the ledger
    goes to memory, then writes those records when the lock is gone, and stays usable."""
    monkeypatch.setattr(ledger_mod, "_LOCKED_ATTEMPTS", 2)
    monkeypatch.setattr(ledger_mod, "_RETRY_FIRST_S", 0.2)
    path = tmp_path / "l.sqlite"
    write_records(path, [])  # the file exists and is ecoguard's
    ledger = Ledger(path, busy_timeout_s=0.05).start(subscribe=False)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        for i in range(5):
            ledger.submit(make_record(i))
        deadline = time.monotonic() + 20
        while ledger.stats()["degraded"] is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ledger.stats()["degraded"] is not None, "the lock never disabled the writer"
        blocker.execute("COMMIT")
        while ledger.stats()["degraded"] is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        ledger.submit(make_record(9))
        assert ledger.flush(10.0)
        stats = ledger.stats()
    finally:
        blocker.close()
        ledger.stop()
    assert stats["degraded"] is None and stats["healthy"]
    assert stats["written"] == 6 and stats["recovered"] == 5 and stats["dropped"] == 0
    assert len(read_rows(path)) == 6


def test_records_still_in_memory_at_exit_are_counted_as_lost(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # the ledger's folder cannot be made, even by root
    with pytest.warns(ledger_mod.LedgerWarning):
        ledger = Ledger(blocker / "l.sqlite").start(subscribe=False)
    try:
        for i in range(3):
            ledger.submit(make_record(i))
        assert ledger.flush(10.0)
        assert ledger.stats()["dropped"] == 0 and ledger.stats()["in_memory"] == 3
        assert ledger.count_lost_at_exit() == 3
        assert ledger.count_lost_at_exit() == 0  # counted once
    finally:
        ledger.stop()
    stats = ledger.stats()
    assert stats["lost_at_exit"] == 3 and stats["dropped"] == 3


def test_a_process_exiting_with_records_only_in_memory_says_so(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    script = (
        "import logging, warnings; logging.basicConfig(); warnings.simplefilter('ignore')\n"
        "from ecoguard.export.ledger import Ledger\n"
        "from tests.ledger.test_ledger import make_record\n"
        f"ledger = Ledger({str(blocker / 'l.sqlite')!r}).start(subscribe=False)\n"
        "for i in range(4): ledger.submit(make_record(i))\n"
        "ledger.flush(10.0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    assert done.returncode == 0, done.stderr
    assert "4 records held in memory" in done.stderr and "lost as the process exits" in done.stderr


def _insert_raw(path, **columns):
    """A row written behind ecoguard's back (by hand, by a damaged writer)."""
    write_records(path, [])
    conn = sqlite3.connect(path)
    names = ", ".join(columns)
    conn.execute(
        f"INSERT INTO generations ({names}) VALUES ({', '.join('?' for _ in columns)})",
        tuple(columns.values()),
    )
    conn.commit()
    conn.close()


@pytest.mark.parametrize("by", ["gpu", "day", "model"])
def test_one_malformed_row_costs_its_group_not_the_report(tmp_path, by):
    path = tmp_path / "l.sqlite"
    write_records(path, [make_record(i, model="good") for i in range(3)])
    _insert_raw(
        path, timestamp=1e300, energy_j=5.0, tokens=5, model_name="odd", gpu_names="[not json"
    )
    report = build_report(path, by=by)
    assert report["total"]["calls"] == 4
    keys = {group["key"] for group in report["groups"]}
    expected_bad = {"gpu": BAD_GPU_NAMES, "day": BAD_TIMESTAMP, "model": "odd"}[by]
    assert expected_bad in keys and len(keys) == 2
    render_text(report)  # and the text report draws it


def test_energy_sums_that_overflow_are_none_in_json_and_text(tmp_path):
    path = tmp_path / "l.sqlite"
    write_records(path, [make_record(i, energy_j=1.7e308) for i in range(3)])
    code, out, err = _report(["report", "--ledger", str(path), "--json"])
    assert code == 0, err
    assert "Infinity" not in out and "NaN" not in out
    report = json.loads(out)
    assert report["total"]["energy_j"] is None and "overflowed" in report["note"]
    code, out, err = _report(["report", "--ledger", str(path)])
    assert code == 0, err
    assert "overflowed" in out


def test_terminal_escapes_in_model_names_are_shown_escaped(tmp_path):
    path = tmp_path / "l.sqlite"
    write_records(path, [make_record(0, model="\x1b[2J\x1b[31mred\u202e")])
    text = render_text(build_report(path))
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b[2J" in text


def test_an_empty_ecoguard_ledger_variable_means_no_ledger():
    assert Settings.from_env({"ECOGUARD_LEDGER": ""}).ledger_path is None
    assert Settings.from_env({"ECOGUARD_LEDGER": "   "}).ledger_path is None
    assert Settings.from_env({}).ledger_path is not None  # unset: the default ledger


def test_valid_utf8_escapes_undecodable_bytes_and_lone_surrogates():
    from ecoguard.printable import shown, valid_utf8

    assert valid_utf8("evil\udcff") == "evil\\xff"
    assert valid_utf8("a\ud800b\udcff") == "a\\ud800b\\xff"  # JSON's lone surrogate too
    assert valid_utf8("\udcc3\udca9") == "é"  # bytes that decode together are shown as text
    text = "plain"
    assert valid_utf8(text) is text
    assert shown("x\ud800\x1b") == "x\\ud800\\x1b"
