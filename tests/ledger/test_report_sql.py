"""``ecoguard report`` aggregates in SQLite: the same report as summing the rows in Python.

The oracle below is the report as it was computed before the aggregation moved into SQL: every
row read back with ``read_rows`` and summed in Python. The randomized ledgers cover what could make
the two disagree: rows written out of timestamp order, missing values, calls within a fraction of
a second of local midnight in zones with DST (Chile moves its clocks at midnight), GPU names that
are not plain ASCII, and a ``--since`` window.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import random
import sqlite3
import subprocess
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ecoguard.export import ledger as ledger_mod
from ecoguard.export import report as report_mod
from ecoguard.export.ledger import COLUMNS, read_rows, write_records
from ecoguard.export.report import build_report, render_text

# ------------------------------------------------------------------ the oracle (the old report)


def _old_group_key(row: dict[str, Any], by: str) -> str:
    if by == "model":
        return row.get("model_name") or "(unknown model)"
    if by == "day":
        return dt.datetime.fromtimestamp(row["timestamp"]).strftime("%Y-%m-%d")
    names = row.get("gpu_names") or []
    return ", ".join(names) if names else "(no GPU)"


def _old_energy(rows: list[dict[str, Any]]) -> float:
    return sum(r.get("energy_j") or 0.0 for r in rows)


def _old_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    energy_j = _old_energy(rows)
    tokens = sum(r.get("tokens") or 0 for r in rows)
    with_reference = [
        r for r in rows if r.get("reference_j_per_token") is not None and r.get("tokens")
    ]
    ref_tokens = sum(r["tokens"] for r in with_reference)
    reference = (
        sum(r["reference_j_per_token"] * r["tokens"] for r in with_reference) / ref_tokens
        if ref_tokens
        else None
    )
    measured_on_ref = (
        sum(r.get("energy_j") or 0.0 for r in with_reference) / ref_tokens if ref_tokens else None
    )
    costs = [r["cost_usd"] for r in rows if r.get("cost_usd") is not None]
    co2 = [r["co2_g"] for r in rows if r.get("co2_g") is not None]
    saved = [r["batching_saved_j"] for r in rows if r.get("batching_saved_j") is not None]
    return {
        "requests": sum(r.get("requests") or 0 for r in rows),
        "calls": len(rows),
        "tokens": tokens,
        "energy_j": energy_j,
        "energy_kwh": energy_j / report_mod.JOULES_PER_KWH,
        "cost_usd": sum(costs) if costs else None,
        "co2_g": sum(co2) if co2 else None,
        "joules_per_token": energy_j / tokens if tokens else None,
        "joules_per_token_where_reference": measured_on_ref,
        "reference_j_per_token": reference,
        "reference_tiers": sorted(
            {r["reference_tier"] for r in with_reference if r.get("reference_tier")}
        ),
        "tiers": sorted({r["tier"] for r in rows if r.get("tier")}),
        "incomplete_calls": sum(1 for r in rows if r.get("complete") == 0),
        "batching_saved_j": sum(saved) if saved else None,
    }


def old_build_report(ledger: Path, *, since: float | None = None, by: str = "model") -> dict:
    rows = read_rows(ledger, since=since)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[_old_group_key(row, by)].append(row)
    ordered = sorted(groups.items(), key=lambda kv: kv[0] if by == "day" else -_old_energy(kv[1]))
    return {
        "ledger": str(ledger),
        "since": None
        if since is None
        else dt.datetime.fromtimestamp(since).isoformat(timespec="seconds"),
        "by": by,
        "groups": [{"key": key, **_old_summary(items)} for key, items in ordered],
        "total": _old_summary(rows),
        "note": None if rows else "no generate calls recorded in this period",
    }


def assert_same_report(new: Any, old: Any, where: str = "report") -> None:
    """Equal, with floats equal to the last few bits (SQLite >= 3.43 sums with compensation)."""
    assert type(new) is type(old), f"{where}: {type(new).__name__} != {type(old).__name__}"
    if isinstance(old, dict):
        assert list(new) == list(old), where
        for key in old:
            assert_same_report(new[key], old[key], f"{where}.{key}")
    elif isinstance(old, list):
        assert len(new) == len(old), f"{where}: {len(new)} != {len(old)} items"
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            assert_same_report(a, b, f"{where}[{i}]")
    elif isinstance(old, float):
        assert math.isclose(new, old, rel_tol=1e-12, abs_tol=1e-12), f"{where}: {new} != {old}"
    else:
        assert new == old, f"{where}: {new!r} != {old!r}"


# ------------------------------------------------------------------ random ledgers

MODELS = ["llama-3-8b", "mistral-7b", "qwen-14b", "big,70b", "", None]
GPUS = [
    ("NVIDIA H100 80GB HBM3",),
    ("NVIDIA A800-SXM4-80GB",),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
    ("NVIDIA A800-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA L4"),
    ("Tesla V100, SXM2",),  # a comma inside a name
    ('GPU "quoted"',),  # escaped by json.dumps
    ("Radeon Instinct MI300X \u00e9",),  # non-ASCII: escaped by json.dumps
    (),
]
TIERS = ["live", "simulated", "", None, "a,b"]
REFERENCE_TIERS = ["measured", "interpolated", "estimated", "none", "", None]


def _local_midnights(first_day: dt.date, days: int) -> list[float]:
    return [
        dt.datetime.combine(first_day + dt.timedelta(days=d), dt.time()).timestamp()
        for d in range(days + 1)
    ]


def random_records(n: int, seed: int, first_day: dt.date, days: int = 31) -> list[Any]:
    rnd = random.Random(seed)
    start = dt.datetime.combine(first_day, dt.time()).timestamp()
    midnights = _local_midnights(first_day, days)
    records = []
    for i in range(n):
        if rnd.random() < 0.08:  # a fraction of a second around a local midnight
            ts = rnd.choice(midnights) + rnd.choice(
                [0.0, -1e-7, -1e-6, -4e-4, -6e-4, -0.3, -1.0, 1e-7, 4e-4, 0.9999]
            )
        else:
            ts = start + rnd.uniform(0, days * 86400)
        tokens = rnd.choice([None, 0, rnd.randint(1, 4096), rnd.randint(1, 64)])
        energy = rnd.choice([None, 0.0, rnd.uniform(0, 5000), float(rnd.randint(0, 9000))])
        reference = rnd.choice([None, None, rnd.uniform(0.05, 8.0), 1.5])
        records.append(
            SimpleNamespace(
                timestamp=ts,
                start_monotonic=float(i),
                end_monotonic=float(i) + 1.0,
                duration_s=1.0,
                energy_j=energy,
                tokens=tokens,
                requests=rnd.choice([None, 1, 2, 8]),
                batch_size=rnd.choice([1, 8]),
                prompt_tokens=16,
                model_name=rnd.choice(MODELS),
                precision="fp16",
                gpu_names=rnd.choice(GPUS),
                gpu_indices=(0,),
                gpu_uuids=("GPU-x",),
                tier=rnd.choice(TIERS),
                cost_usd=rnd.choice([None, rnd.uniform(0, 0.5)]),
                co2_g=rnd.choice([None, rnd.uniform(0, 200)]),
                joules_per_token=None,
                reference_j_per_token=reference,
                reference_tier=rnd.choice(REFERENCE_TIERS),
                label=f"call-{i}",
                method="counter_edge_corrected",
                idle_power_w=None,
                complete=rnd.choice([None, 0, 1, 1, 1]),
                error=None,
                batching_saved_j=rnd.choice([None, None, rnd.uniform(0, 900)]),
            )
        )
    # Not in timestamp order (threads, processes): the report must not depend on insert order.
    rnd.shuffle(records)
    return records


@contextlib.contextmanager
def local_timezone(name: str):
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("TZ", name)
        time.tzset()
        yield
    finally:
        mp.undo()
        time.tzset()


def _raw_gpu_rows(path: Path, start: float) -> None:
    """Rows whose gpu_names were not written by json.dumps: Python must decode those."""
    conn = ledger_mod.connect(path)
    values = ['["a","b"]', '[ "a" ]', "null", '[""]', '["", ""]', "[]", "", None, '["x", "y"]']
    with conn:
        for i, raw in enumerate(values):
            conn.execute(
                "INSERT INTO generations (timestamp, energy_j, tokens, gpu_names, model_name) "
                "VALUES (?, ?, ?, ?, ?)",
                (start + 3600.0 * i, 10.0 + i, 5, raw, "raw"),
            )
    conn.close()


@pytest.mark.parametrize(
    ("zone", "first_day"),
    [
        ("UTC", dt.date(2026, 10, 15)),
        ("Europe/Berlin", dt.date(2026, 3, 15)),  # spring forward on 29 March
        ("America/Santiago", dt.date(2026, 3, 20)),  # clocks go back at midnight in April
        ("Asia/Kolkata", dt.date(2026, 11, 1)),  # a half-hour offset
    ],
)
def test_sql_report_equals_the_python_sum(tmp_path, zone, first_day):
    if not Path("/usr/share/zoneinfo", zone).exists() and zone != "UTC":
        pytest.skip(f"no tz data for {zone}")
    with local_timezone(zone):
        path = tmp_path / "ledger.sqlite"
        seed = sum(map(ord, zone))
        assert write_records(path, random_records(2000, seed, first_day)) == 2000
        start = dt.datetime.combine(first_day, dt.time()).timestamp()
        _raw_gpu_rows(path, start)
        since = start + 12.5 * 86400
        for by in ("model", "day", "gpu"):
            for window in (None, since):
                new = build_report(path, by=by, since=window)
                old = old_build_report(path, by=by, since=window)
                assert_same_report(new, old, f"{zone} by={by} since={window}")
                assert len(new["groups"]) > 3
                assert render_text(new) == render_text(old)
                if sqlite3.sqlite_version_info < (3, 43):
                    # Plain float sums in the same order as Python 3.11's sum: bit for bit.
                    assert json.dumps(new) == json.dumps(old)
        days = [g["key"] for g in build_report(path, by="day")["groups"]]
        assert len(days) >= 31
        assert "(no GPU)" in [g["key"] for g in build_report(path, by="gpu")["groups"]]


def test_empty_window_and_empty_ledger_match_the_old_report(tmp_path):
    path = tmp_path / "ledger.sqlite"
    write_records(path, random_records(50, 7, dt.date(2026, 1, 1)))
    later = time.time() + 86400
    for by in ("model", "day", "gpu"):
        new = build_report(path, by=by, since=later)
        assert json.dumps(new) == json.dumps(old_build_report(path, by=by, since=later))
        assert new["note"] == "no generate calls recorded in this period"
    empty = tmp_path / "empty.sqlite"
    ledger_mod.connect(empty).close()
    assert json.dumps(build_report(empty)) == json.dumps(old_build_report(empty))


def test_groups_tied_on_energy_keep_first_seen_order(tmp_path):
    path = tmp_path / "ledger.sqlite"
    base = 1_790_000_000.0
    records = random_records(3, 1, dt.date(2026, 5, 1))
    for record, (model, ts) in zip(
        records, [("zeta", base), ("alpha", base + 5), ("mid", base + 2)], strict=True
    ):
        record.model_name, record.timestamp, record.energy_j = model, ts, 42.0
    write_records(path, records)
    keys = [g["key"] for g in build_report(path, by="model")["groups"]]
    assert keys == [g["key"] for g in old_build_report(path, by="model")["groups"]]
    assert keys == ["zeta", "mid", "alpha"]


def test_a_file_that_is_not_a_ledger_is_a_usage_error(tmp_path):
    from ecoguard.errors import UsageError

    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(UsageError, match="not a readable ecoguard ledger"):
        build_report(junk)


# ------------------------------------------------------------------ big ledgers


def _bulk_ledger(path: Path, rows: int) -> None:
    """``rows`` calls over 30 days, inserted by SQLite itself (writing them one by one from
    Python would take most of the test's time)."""
    conn = ledger_mod.connect(path)
    with conn:
        conn.execute(
            f"""WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
            INSERT INTO generations ({", ".join(COLUMNS)})
            SELECT 1790000000.0 + i * (30 * 86400.0 / ?), i, i + 1, 1.0,
                   50.0 + (i % 97), 64 + (i % 13), 1 + (i % 3), 8, 16,
                   'model-' || (i % 5), 'fp16', '["NVIDIA H100 80GB HBM3"]', '[0]', '["GPU-x"]',
                   'live', 1e-6 * (i % 11), 1e-3 * (i % 7), NULL,
                   CASE WHEN i % 4 THEN 1.25 END, CASE WHEN i % 4 THEN 'measured' END,
                   'call', 'counter_edge_corrected', NULL, 1, NULL,
                   CASE WHEN i % 3 = 0 THEN 0.5 * (i % 19) END
            FROM n""",
            (rows - 1, rows),
        )
    conn.close()


def test_report_over_200k_rows_does_not_read_the_rows_into_python(tmp_path, monkeypatch):
    path = tmp_path / "big.sqlite"
    _bulk_ledger(path, 200_000)

    def no_rows(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("build_report must not read every row into Python")

    monkeypatch.setattr(ledger_mod, "read_rows", no_rows)
    for by in ("model", "day", "gpu"):
        tracemalloc.start()
        try:
            report = build_report(path, by=by)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert report["total"]["calls"] == 200_000
        assert report["total"]["tokens"] == sum(64 + i % 13 for i in range(200_000))
        assert report["total"]["reference_tiers"] == ["measured"]
        saved = sum(0.5 * (i % 19) for i in range(0, 200_000, 3))
        assert report["total"]["batching_saved_j"] == pytest.approx(saved)
        # Reading the rows took ~1.5 KB each (300 MB); the aggregates are a few groups.
        assert peak < 2_000_000, f"{by}: peak {peak / 1e6:.1f} MB traced"
    assert len(build_report(path, by="model")["groups"]) == 5
    assert len(build_report(path, by="day")["groups"]) in (30, 31)


# ------------------------------------------------------------------ read-only storage


def test_report_on_a_read_only_filesystem(tmp_path):
    """A WAL ledger on read-only storage: connect(readonly) falls back to immutable, and the
    SQL aggregation (with its Python callbacks) works there too."""
    mount = tmp_path / "ro"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'not root'})")
    try:
        path = mount / "ledger.sqlite"
        write_records(path, random_records(300, 3, dt.date(2026, 6, 1)))
        expected = {by: old_build_report(path, by=by) for by in ("model", "day", "gpu")}
        remount = subprocess.run(
            ["mount", "-o", "remount,ro", str(mount)], capture_output=True, text=True
        )
        assert remount.returncode == 0, remount.stderr
        for by, old in expected.items():
            assert_same_report(build_report(path, by=by), old, by)
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
