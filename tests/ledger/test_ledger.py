"""The SQLite ledger and ``ecoguard report``."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

from ecoguard import events
from ecoguard.cli import main
from ecoguard.energy import GenerationRecord
from ecoguard.export import ledger as ledger_mod
from ecoguard.export import ledger_db
from ecoguard.export.ledger import SCHEMA_VERSION, Ledger, LedgerWarning, read_rows, write_records
from ecoguard.export.report import build_report, parse_since


def make_record(
    i: int = 0, *, model="m-7b", energy_j=100.0, tokens=50, ts=None, gpu="NVIDIA A800-SXM4-80GB"
):
    ts = time.time() if ts is None else ts
    return GenerationRecord(
        start_monotonic=float(i),
        end_monotonic=float(i) + 1.0,
        timestamp=ts,
        duration_s=1.0,
        energy_j=energy_j,
        tokens=tokens,
        requests=2,
        batch_size=2,
        prompt_tokens=16,
        model_name=model,
        precision="fp16",
        gpu_names=(gpu,),
        gpu_indices=(0,),
        tier="live",
        cost_usd=energy_j / 3.6e6 * 0.12,
        co2_g=energy_j / 3.6e6 * 390.0,
        joules_per_token=energy_j / tokens if tokens else None,
        reference_j_per_token=1.5,
        reference_tier="measured",
        label=f"call-{i}",
        gpu_uuids=("GPU-x",),
        method="counter_edge_corrected",
    )


@pytest.fixture(autouse=True)
def _stop_global_ledger():
    yield
    ledger_mod.stop_ledger()


def test_round_trip_through_the_event_bus(tmp_path):
    path = tmp_path / "l.sqlite"
    ledger = Ledger(path).start()
    try:
        records = [make_record(i, energy_j=10.0 * (i + 1)) for i in range(20)]
        for record in records:
            events.records.publish(record)
        assert ledger.flush(5.0)
    finally:
        ledger.stop()
    rows = read_rows(path)
    assert len(rows) == 20
    assert rows[3]["energy_j"] == 40.0 and rows[3]["gpu_names"] == ["NVIDIA A800-SXM4-80GB"]
    assert rows[3]["label"] == "call-3" and rows[3]["complete"] == 1
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    report = build_report(path, by="model")
    total = report["total"]
    assert total["energy_j"] == pytest.approx(sum(r.energy_j for r in records))
    assert total["tokens"] == 1000 and total["requests"] == 40
    assert total["joules_per_token"] == pytest.approx(2100.0 / 1000)
    assert total["cost_usd"] == pytest.approx(sum(r.cost_usd for r in records))
    assert total["reference_j_per_token"] == pytest.approx(1.5)


def test_a_malformed_record_is_refused_alone_and_the_ledger_keeps_writing(tmp_path, recwarn):
    """A record without a timestamp (NOT NULL) is that record's fault: it stays in memory and is
    counted; its batch-mates and later records still reach the disk, with no warning."""
    import dataclasses

    path = tmp_path / "l.sqlite"
    ledger = Ledger(path, batch_size=50).start(subscribe=False)
    try:
        bad = dataclasses.replace(make_record(99), timestamp=None)
        batch = [make_record(0), bad, make_record(1)]
        for record in batch:
            ledger.submit(record)
        assert ledger.flush(5.0)
        ledger.submit(make_record(2))
        assert ledger.flush(5.0)
        stats = ledger.stats()
    finally:
        ledger.stop()
    assert [row["label"] for row in read_rows(path)] == ["call-0", "call-1", "call-2"]
    assert stats["rejected"] == 1 and stats["in_memory"] == 1 and stats["degraded"] is None
    assert list(ledger.memory) == [bad]
    assert not [w for w in recwarn if issubclass(w.category, LedgerWarning)]


def test_migration_from_an_empty_v0_database(tmp_path):
    path = tmp_path / "old.sqlite"
    sqlite3.connect(path).close()  # user_version 0, no tables
    assert write_records(path, [make_record()]) == 1
    assert len(read_rows(path)) == 1
    newer = tmp_path / "newer.sqlite"
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.warns(LedgerWarning, match="newer than this ecoguard"):
        ledger = Ledger(newer).start(subscribe=False)
    ledger.submit(make_record())
    assert ledger.flush(5.0)
    ledger.stop()
    assert len(ledger.memory) == 1  # kept in memory, the newer database untouched


def test_concurrent_writer_threads(tmp_path):
    path = tmp_path / "c.sqlite"
    ledger = ledger_mod.start_ledger(type("S", (), {"ledger_path": path})())
    assert ledger_mod.start_ledger(type("S", (), {"ledger_path": path})()) is ledger

    def publish(offset: int) -> None:
        for i in range(300):
            events.records.publish(make_record(offset + i))

    threads = [threading.Thread(target=publish, args=(k * 1000,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ledger_mod.flush(10.0)
    stats = ledger.stats()
    assert stats["written"] + stats["dropped"] == 2400 and stats["dropped"] == 0
    assert len(read_rows(path)) == 2400


_WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_ledger import make_record
    from ecoguard import events
    from ecoguard.export.ledger import Ledger
    ledger = Ledger({path!r}, batch_size=50).start()
    i = 0
    print("started", flush=True)
    while i < {count}:
        events.records.publish(make_record(i))
        i += 1
        if i == {flush_at}:
            ledger.flush(20)
            print("flushed", flush=True)
        if i % 50 == 0:
            time.sleep(0.001)  # on purpose: lets the other process (or the kill) in between batches
    ledger.flush(20)
    ledger.stop()
    print("done", flush=True)
    """
)


def _writer(path, count, tmp_path, flush_at=-1):
    """A process that publishes ``count`` records to a ledger on ``path``; it prints "started",
    then "flushed" once the first ``flush_at`` records are in the database, then "done"."""
    script = _WRITER.format(
        tests=os.path.dirname(__file__), path=str(path), count=count, flush_at=flush_at
    )
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)


def test_two_processes_write_one_database(tmp_path):
    path = tmp_path / "shared.sqlite"
    procs = [_writer(path, 1500, tmp_path) for _ in range(2)]
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "done" in out
    assert len(read_rows(path)) == 3000


def test_kill_9_during_writes_leaves_a_readable_database(tmp_path):
    path = tmp_path / "killed.sqlite"
    proc = _writer(path, 10_000_000, tmp_path, flush_at=2500)
    assert proc.stdout.readline().strip() == "started"
    assert proc.stdout.readline().strip() == "flushed"  # and it goes on writing
    count = len(read_rows(path))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert count > 2000
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    rows = read_rows(path)
    assert len(rows) >= count and rows[-1]["model_name"] == "m-7b"
    assert write_records(path, [make_record()]) == 1  # and writable again


def test_unwritable_path_warns_once_and_keeps_records_in_memory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    seen = []
    unsubscribe = events.on_record(seen.append)
    with pytest.warns(LedgerWarning, match="ledger disabled") as caught:
        ledger = Ledger(blocker / "ledger.sqlite").start()
    try:
        for i in range(5):
            events.records.publish(make_record(i))
        assert ledger.flush(5.0)
    finally:
        ledger.stop()
        unsubscribe()
    assert len(caught) == 1 and len(ledger.memory) == 5 and len(seen) == 5
    assert ledger.stats()["degraded"].startswith("cannot open")


def test_write_failure_mid_run_degrades_with_one_warning(tmp_path):
    ledger = Ledger(tmp_path / "w.sqlite").start(subscribe=False)
    ledger.submit(make_record(0))
    assert ledger.flush(5.0)
    ledger._conn.close()  # the disk goes away under the writer
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            ledger.submit(make_record(i))
            assert ledger.flush(5.0)
    ledger.stop()
    assert [w.category for w in caught] == [LedgerWarning]
    assert ledger.written == 1 and len(ledger.memory) == 3


def test_full_queue_counts_drops_instead_of_blocking(tmp_path):
    ledger = Ledger(tmp_path / "q.sqlite", queue_size=10)  # writer not started: nothing drains
    started = time.perf_counter()
    with pytest.warns(LedgerWarning, match="write queue is full") as caught:
        results = [ledger.submit(make_record(i)) for i in range(15)]
    assert time.perf_counter() - started < 0.5
    assert results.count(True) == 10 and ledger.dropped == 5
    assert len(caught) == 1  # the first loss is warned about, every one is counted
    assert ledger.stats()["dropped_queue_full"] == 5 and not ledger.stats()["healthy"]


def test_parse_since():
    now = 1_800_000_000.0
    assert parse_since("7d", now=now) == now - 7 * 86400
    assert parse_since("24h", now=now) == now - 86400
    assert parse_since("30m", now=now) == now - 1800
    assert parse_since("2026-11-01") > 0
    for bad in ("yesterday", "7x", "", "-3d"):
        with pytest.raises(Exception, match="accepted: 7d, 24h"):
            parse_since(bad, now=now)


def test_report_cli_text_json_and_bad_input(tmp_path, capsys):
    path = tmp_path / "r.sqlite"
    now = time.time()
    write_records(
        path,
        [
            make_record(0, model="big-70b", energy_j=9000.0, tokens=100, ts=now - 3600),
            make_record(1, model="small-1b", energy_j=1000.0, tokens=500, ts=now - 60),
            make_record(2, model="small-1b", energy_j=500.0, tokens=0, ts=now - 30 * 86400),
        ],
    )
    assert main(["report", "--ledger", str(path), "--json", "--since", "7d"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [g["key"] for g in report["groups"]] == ["big-70b", "small-1b"]
    assert report["total"]["energy_j"] == pytest.approx(10_000.0)
    assert report["groups"][1]["joules_per_token"] == pytest.approx(2.0)
    assert main(["report", "--ledger", str(path), "--by", "gpu"]) == 0
    text = capsys.readouterr().out
    assert "NVIDIA A800-SXM4-80GB" in text and "#" in text and "TOTAL" in text
    assert main(["report", "--ledger", str(path), "--by", "day", "--json"]) == 0
    days = sorted(
        {time.strftime("%Y-%m-%d", time.localtime(now - d)) for d in (3600, 60, 30 * 86400)}
    )
    assert [g["key"] for g in json.loads(capsys.readouterr().out)["groups"]] == days
    assert main(["report", "--ledger", str(path), "--since", "last tuesday"]) == 2
    assert "accepted: 7d, 24h" in capsys.readouterr().err
    assert main(["report", "--ledger", str(path), "--by", "color"]) == 2
    assert main(["report", "--ledger", str(tmp_path / "missing.sqlite")]) == 0
    assert "no ledger at" in capsys.readouterr().out


def test_failed_migration_step_rolls_back(tmp_path, monkeypatch):
    path = tmp_path / "m.sqlite"
    write_records(path, [make_record(i) for i in range(3)])
    monkeypatch.setattr(ledger_db, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    steps = ["ALTER TABLE generations ADD COLUMN extra REAL", "NOT SQL"]
    monkeypatch.setitem(ledger_mod.MIGRATIONS, SCHEMA_VERSION, tuple(steps))
    with pytest.raises(sqlite3.Error):
        ledger_mod.connect(path)
    conn = sqlite3.connect(path)
    assert "extra" not in [row[1] for row in conn.execute("PRAGMA table_info(generations)")]
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
    steps[1] = "UPDATE generations SET extra = energy_j"
    monkeypatch.setitem(ledger_mod.MIGRATIONS, SCHEMA_VERSION, tuple(steps))
    ledger_mod.connect(path).close()
    assert [r["extra"] for r in read_rows(path)] == [100.0] * 3


def test_stop_with_a_backlog_lets_the_writer_finish_and_close(tmp_path, recwarn):
    """stop() timing out while the writer drains must not close the database under it (which
    would degrade the ledger with a false warning); the writer finishes and closes it."""
    path = tmp_path / "l.sqlite"
    ledger = Ledger(path, batch_size=1).start(subscribe=False)
    for i in range(3000):
        ledger.submit(make_record(i))
    writer = ledger._thread
    ledger.stop(timeout=0.001)
    writer.join(60)  # the writer drains the backlog, closes the database and ends
    assert ledger._conn is None, "the writer never closed the database"
    assert ledger.degraded is None
    assert not [w for w in recwarn if issubclass(w.category, LedgerWarning)]
    assert len(read_rows(path)) == 3000


def test_measure_label_fills_the_label_column(tmp_path):
    """Records that end inside ``ecoguard.measure("label")`` carry the innermost block's label
    into the ledger; a label the call already has wins; outside any block it stays empty."""
    from ecoguard.config import Settings
    from ecoguard.energy import CallInfo
    from ecoguard.services import measure, start_services

    path = tmp_path / "l.sqlite"
    services = start_services(Settings(backend="simulated", ledger_path=path))
    meter = services.meter
    try:

        def call(label=None):
            window = meter.begin(devices=None, info=CallInfo(model_name="m", label=label))
            return meter.end(window, tokens=2, requests=1)

        call()
        with measure("nightly batch") as block:
            call()
            with measure("inner"):
                call()
            call(label="explicit")
        assert ledger_mod.flush(5.0)
    finally:
        services.stop()
    conn = sqlite3.connect(path)
    labels = [row[0] for row in conn.execute("SELECT label FROM generations ORDER BY id")]
    conn.close()
    assert labels == [None, "nightly batch", "inner", "explicit"]
    assert [r.label for r in block.records] == ["nightly batch", "inner", "explicit"]


def test_a_database_locked_by_another_writer_is_waited_out(tmp_path, monkeypatch):
    """Another process holding the write lock longer than SQLite's busy wait (forked workers,
    a second service on the same file): the batch is tried again, not given up on, and the
    ledger stays healthy."""
    from ecoguard.faults import fault_counts, reset_faults

    reset_faults()
    met_lock = threading.Event()

    def record_fault(stage, exc=None, **kwargs):
        real_record_fault(stage, exc, **kwargs)
        if stage == "ledger.locked":
            met_lock.set()

    real_record_fault = ledger_mod.record_fault
    monkeypatch.setattr(ledger_mod, "record_fault", record_fault)
    path = tmp_path / "l.sqlite"
    ledger = Ledger(path, busy_timeout_s=0.05).start(subscribe=False)
    try:
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # the other writer's transaction
        for i in range(5):
            ledger.submit(make_record(i))
        met_lock.wait(10.0)
        assert fault_counts().get("ledger.locked"), "the writer never met the lock"
        blocker.execute("COMMIT")
        blocker.close()
        assert ledger.flush(10.0)
        stats = ledger.stats()
    finally:
        ledger.stop()
    assert stats["written"] == 5 and stats["degraded"] is None and stats["healthy"]
