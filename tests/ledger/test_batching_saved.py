"""The energy batching saved: estimated once where the coalesced record is made (the meter), carried
on the record, stored in the ledger (schema 2) and summed by ``ecoguard report``."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest

from ecoguard.config import Settings
from ecoguard.energy import CallInfo, Meter
from ecoguard.energy.backends import DeviceInfo
from ecoguard.export import ledger_db
from ecoguard.export.ledger import read_rows, write_records
from ecoguard.export.report import build_report, render_text
from ecoguard.knowledge.estimator import batch_energy_ratio


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class _Backend:
    """One GPU whose counter grows 100 J per second of the injected clock."""

    name, tier = "test", "live"
    counter_quantised = False

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock

    def device_count(self) -> int:
        return 1

    def device_info(self, index: int) -> DeviceInfo:
        return DeviceInfo(index=0, name="Test GPU", uuid="GPU-test", power_limit_w=400.0)

    def energy_j(self, index: int) -> float:
        return self.clock() * 100.0

    def power_w(self, index: int) -> float:
        return 100.0

    def close(self) -> None:
        pass


def _call(meter: Meter, clock: _Clock, *, requests: int, batch_size: int | None):
    window = meter.begin(info=CallInfo(model_name="m", precision="fp16", batch_size=requests))
    clock.t += 2.0
    return meter.end(window, tokens=64, requests=requests, batch_size=batch_size)


def _records():
    clock = _Clock()
    meter = Meter(Settings(ledger_path=None), backend=_Backend(clock), clock=clock, calibrate=False)
    try:
        alone = _call(meter, clock, requests=2, batch_size=None)
        coalesced = _call(meter, clock, requests=2, batch_size=8)
        again = _call(meter, clock, requests=1, batch_size=8)
    finally:
        meter.stop()
    return alone, coalesced, again


def test_the_meter_puts_the_saving_on_a_coalesced_record_only():
    alone, coalesced, again = _records()
    assert alone.batching_saved_j is None  # ran its own batch: nothing coalesced
    assert coalesced.energy_j > 0
    ratio = batch_energy_ratio(8, 2)[0]
    assert ratio > 1
    assert coalesced.batching_saved_j == pytest.approx(coalesced.energy_j * (ratio - 1.0))
    assert again.batching_saved_j == pytest.approx(
        again.energy_j * (batch_energy_ratio(8, 1)[0] - 1.0)
    )
    assert coalesced.to_dict()["batching_saved_j"] == coalesced.batching_saved_j


def test_the_ledger_stores_it_and_the_report_sums_it(tmp_path):
    records = _records()
    path = tmp_path / "ledger.db"
    assert write_records(path, records) == 3
    stored = [row["batching_saved_j"] for row in read_rows(path)]
    assert stored == [record.batching_saved_j for record in records]
    report = build_report(path)
    expected = records[1].batching_saved_j + records[2].batching_saved_j
    assert report["total"]["batching_saved_j"] == pytest.approx(expected)
    assert report["groups"][0]["batching_saved_j"] == pytest.approx(expected)
    assert f"batching saved an estimated {expected / 3.6e6:.6f} kWh" in render_text(report)


def test_no_coalesced_call_reports_no_saving(tmp_path):
    alone = _records()[0]
    path = tmp_path / "ledger.db"
    write_records(path, [alone])
    report = build_report(path)
    assert report["total"]["batching_saved_j"] is None
    assert "batching saved" not in render_text(report)


def _version_1_ledger(path, record) -> None:
    """A ledger as ecoguard wrote it before schema 2 (no batching_saved_j column)."""
    conn = sqlite3.connect(path)
    for statement in ledger_db.MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    columns = [c for c in ledger_db.COLUMNS if c != "batching_saved_j"]
    row = dict(zip(ledger_db.COLUMNS, ledger_db.record_row(record), strict=True))
    conn.execute(
        f"INSERT INTO generations ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        [row[c] for c in columns],
    )
    conn.commit()
    conn.close()


def test_a_version_1_ledger_reports_as_before_and_migrates_on_write(tmp_path):
    coalesced = _records()[1]
    path = tmp_path / "ledger.db"
    _version_1_ledger(path, dataclasses.replace(coalesced, batching_saved_j=None))
    # Read-only (never migrated): the report reads the missing column as no estimate.
    report = build_report(path)
    assert report["total"]["calls"] == 1 and report["total"]["batching_saved_j"] is None
    write_records(path, [coalesced])  # a writer migrates it to schema 2
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == ledger_db.SCHEMA_VERSION == 2
    conn.close()
    assert [row["batching_saved_j"] for row in read_rows(path)] == [
        None,
        coalesced.batching_saved_j,
    ]
    report = build_report(path)
    assert report["total"]["batching_saved_j"] == pytest.approx(coalesced.batching_saved_j)
