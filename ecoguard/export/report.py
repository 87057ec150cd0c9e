"""``ecoguard report``: what the ledger recorded, grouped by model, day or GPU.

Per group: requests, tokens, energy (kWh), cost ($), CO2 (g), and joules per token measured beside
the reference figure for the same configurations (token-weighted over the calls that had one), with
the tiers of both. Text output ends with an ASCII bar chart of energy per group.

The figures are aggregated inside SQLite (one ``GROUP BY`` pass for the groups and one pass for the
total), so a ledger of millions of calls is never read into Python. The rows feed each aggregate in
``timestamp`` order, the order :func:`_summary` sums them in, and the grouping keys are those of
:func:`_group_key`: the SQL computes the common cases and calls back into Python for the rest
(a day within a second of local midnight or outside 1971-2036, GPU names that are not plain
``json.dumps`` output), so the report is the same as summing the rows in Python.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import sqlite3
from pathlib import Path
from typing import Any

from ecoguard.errors import UsageError
from ecoguard.export.ledger import connect
from ecoguard.export.ledger_db import has_column
from ecoguard.printable import shown, valid_utf8

GROUPINGS: tuple[str, ...] = ("model", "day", "gpu")
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$", re.IGNORECASE)
_UNIT_S = {"m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
SINCE_FORMATS = "7d, 24h, 30m, 2w (ago) or a local date/time 2026-11-01, 2026-11-01T08:00"
JOULES_PER_KWH = 3.6e6
EARLIEST_SINCE = "1970-01-02"
_EARLIEST_SINCE_S = 86400.0  # 1970-01-02 UTC: a day of margin for any local time zone
_LATEST_SINCE_S = 253370764800.0  # 9999-01-01 UTC: later cannot be shown as a date


def parse_since(text: str, *, now: float | None = None) -> float:
    """``--since`` as epoch seconds. Relative (``7d``, ``24h``, ``30m``, ``2w``) or ISO local date."""
    now = _dt.datetime.now().timestamp() if now is None else now
    match = _RELATIVE.match(text or "")
    if match:
        since = now - float(match.group(1)) * _UNIT_S[match.group(2).lower()]
    else:
        try:
            since = _dt.datetime.fromisoformat(text.strip()).timestamp()
        except (ValueError, AttributeError, OverflowError, OSError):
            # (a date the platform cannot place in time, such as 0001-01-01, lands here too)
            raise UsageError(
                f"bad --since {text!r}; accepted: {SINCE_FORMATS}, from {EARLIEST_SINCE} on"
            ) from None
    # The ledger starts in 1970: a time before it (20 digits of days, year 1) is a typo, and
    # it could not be shown as a date either.
    if not since >= _EARLIEST_SINCE_S:
        raise UsageError(
            f"--since {text!r} is before {EARLIEST_SINCE}; give a later date or a shorter span "
            f"({SINCE_FORMATS})"
        )
    if since >= _LATEST_SINCE_S:
        raise UsageError(f"--since {text!r} is after the year 9998; give an earlier date")
    return since


# The group a row lands in when its own value cannot be read (a row written by hand or by a
# damaged writer): one bad row costs its own grouping, never the whole report.
BAD_TIMESTAMP = "(unreadable timestamp)"
BAD_GPU_NAMES = "(unreadable GPU names)"


def _day_of(timestamp: float) -> str:
    """The local calendar day of ``timestamp`` (the ``day`` grouping)."""
    try:
        return _dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d")
    except (TypeError, ValueError, OverflowError, OSError):
        return BAD_TIMESTAMP


def _gpu_key(gpu_names: Any) -> str:
    """The ``gpu`` grouping of a row's ``gpu_names`` (decoded list, or the JSON text stored)."""
    try:
        names = json.loads(gpu_names) if isinstance(gpu_names, str) and gpu_names else gpu_names
    except ValueError:
        return BAD_GPU_NAMES
    names = names or []
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return BAD_GPU_NAMES
    return ", ".join(names) if names else "(no GPU)"


def _group_key(row: dict[str, Any], by: str) -> str:
    if by == "model":
        return row.get("model_name") or "(unknown model)"
    if by == "day":
        return _day_of(row["timestamp"])
    return _gpu_key(row.get("gpu_names"))


# The grouping keys in SQL, the same as _group_key on the row read back.
_MODEL_SQL = "COALESCE(NULLIF(model_name, ''), '(unknown model)')"
# SQLite's 'localtime' and Python's fromtimestamp both ask the C library's localtime() about the
# whole second, but round the fraction differently (to the millisecond vs the microsecond). They
# can only disagree about the day when the local date changes within a second of the call, and
# SQLite maps years outside 1971-2037 onto others for DST: those rows ask Python.
_DAY_SQL = """CASE WHEN timestamp BETWEEN 31622400 AND 2114380800
        AND date(timestamp - 1, 'unixepoch', 'localtime')
            = date(timestamp + 1, 'unixepoch', 'localtime')
    THEN date(timestamp, 'unixepoch', 'localtime')
    ELSE ecoguard_day(timestamp) END"""
# gpu_names is json.dumps(list of names): '["A", "B"]' -> "A, B" in SQL when the names are plain
# printable ASCII without quotes or backslashes (then the only '", "' are the separators);
# anything else (escapes, other spacing, 'null') is decoded by Python.
_GPU_INNER = "substr(gpu_names, 3, length(gpu_names) - 4)"
_GPU_SQL = f"""CASE WHEN gpu_names IS NULL OR gpu_names IN ('', '[]') THEN '(no GPU)'
    WHEN length(gpu_names) >= 4 AND substr(gpu_names, 1, 2) = '["'
        AND substr(gpu_names, -2) = '"]' AND NOT gpu_names GLOB '*[^ -~]*'
        AND instr(gpu_names, '\\') = 0
        AND instr(replace({_GPU_INNER}, '", "', ''), '"') = 0
    THEN replace({_GPU_INNER}, '", "', ', ')
    ELSE ecoguard_gpu_key(gpu_names) END"""
_KEY_SQL = {"model": _MODEL_SQL, "day": _DAY_SQL, "gpu": _GPU_SQL}

# A call counts toward the reference J/token when it has a reference and tokens (as _summary).
_WITH_REFERENCE = "(ref IS NOT NULL AND tokens <> 0)"
# _summary's figures as aggregates over the ledger's rows. TOTAL is a float sum (as Python's sum
# of the REAL columns); COUNT beside it tells "no value" (None) from 0.0. Tier names are collected
# hex-encoded so that a comma in one cannot split it.
_AGGREGATES = f"""COUNT(*),
    TOTAL(energy_j),
    COALESCE(SUM(tokens), 0),
    COALESCE(SUM(requests), 0),
    COUNT(cost_usd), TOTAL(cost_usd),
    COUNT(co2_g), TOTAL(co2_g),
    SUM(CASE WHEN {_WITH_REFERENCE} THEN tokens END),
    TOTAL(CASE WHEN {_WITH_REFERENCE} THEN ref * tokens END),
    TOTAL(CASE WHEN {_WITH_REFERENCE} THEN energy_j END),
    group_concat(DISTINCT CASE WHEN {_WITH_REFERENCE} AND reference_tier <> ''
        THEN hex(reference_tier) END),
    group_concat(DISTINCT CASE WHEN tier <> '' THEN hex(tier) END),
    COUNT(CASE WHEN complete = 0 THEN 1 END),
    COUNT(saved), TOTAL(saved),
    MIN(timestamp)"""


def _rows_sql(by: str | None, where: str, saved: str) -> str:
    """The ledger's rows (with their grouping key ``k``) in the order read_rows gives them.
    ``saved``: the batching-saving column, or NULL for a ledger from before it."""
    key = "NULL" if by is None else _KEY_SQL[by]
    return (
        f"SELECT {key} AS k, timestamp, energy_j, tokens, requests, cost_usd, co2_g, "
        f"reference_j_per_token AS ref, reference_tier, tier, complete, {saved} AS saved "
        f"FROM generations{where} ORDER BY timestamp"
    )


def _aggregate(
    conn: sqlite3.Connection, by: str, since: float | None
) -> tuple[list[tuple[str, dict[str, Any], float]], dict[str, Any]]:
    """(key, summary, first timestamp) per group, in key order, and the total's summary."""
    where, params = ("", ()) if since is None else (" WHERE timestamp >= ?", (since,))
    saved = "batching_saved_j" if has_column(conn, "batching_saved_j") else "NULL"
    # An aggregate over an ORDER BY subquery: SQLite keeps the order (it is not flattened), so
    # each sum adds the rows oldest first, as _summary does over read_rows.
    groups = [
        (row[0], _summary_of(row[1:-1]), row[-1])
        for row in conn.execute(
            f"SELECT k, {_AGGREGATES} FROM ({_rows_sql(by, where, saved)}) GROUP BY k ORDER BY k",
            params,
        )
    ]
    total = conn.execute(
        f"SELECT {_AGGREGATES} FROM ({_rows_sql(None, where, saved)})", params
    ).fetchone()
    return groups, _summary_of(total[:-1])


def _tiers(hex_list: str | None) -> list[str]:
    return sorted(
        {bytes.fromhex(h).decode("utf-8") for h in hex_list.split(",")} if hex_list else ()
    )


def _summary_of(values: tuple[Any, ...]) -> dict[str, Any]:
    """_summary's dict from the columns of _AGGREGATES (without the first timestamp)."""
    (
        calls,
        energy_j,
        tokens,
        requests,
        cost_count,
        cost_usd,
        co2_count,
        co2_g,
        ref_tokens,
        ref_weighted,
        energy_on_ref,
        reference_tiers,
        tiers,
        incomplete,
        saved_count,
        saved_j,
    ) = values
    if not calls:
        return _summary([])
    return {
        "requests": requests,
        "calls": calls,
        "tokens": tokens,
        "energy_j": energy_j,
        "energy_kwh": energy_j / JOULES_PER_KWH,
        "cost_usd": cost_usd if cost_count else None,
        "co2_g": co2_g if co2_count else None,
        "joules_per_token": energy_j / tokens if tokens else None,
        "joules_per_token_where_reference": energy_on_ref / ref_tokens if ref_tokens else None,
        "reference_j_per_token": ref_weighted / ref_tokens if ref_tokens else None,
        "reference_tiers": _tiers(reference_tiers),
        "tiers": _tiers(tiers),
        "incomplete_calls": incomplete,
        "batching_saved_j": saved_j if saved_count else None,
    }


def build_report(
    ledger: str | Path, *, since: float | None = None, by: str = "model"
) -> dict[str, Any]:
    """Aggregate the ledger at ``ledger``. Missing file -> an empty report with a note."""
    if by not in GROUPINGS:
        raise UsageError(f"unknown grouping {by!r}; accepted: {', '.join(GROUPINGS)}")
    path = Path(ledger)
    report: dict[str, Any] = {
        "ledger": valid_utf8(str(path)),
        "since": None
        if since is None
        else _dt.datetime.fromtimestamp(since).isoformat(timespec="seconds"),
        "by": by,
        "groups": [],
        "total": _summary([]),
        "note": None,
    }
    if not path.exists():
        report["note"] = (
            f"no ledger at {path} yet: it is written while ecoguard measures generate calls"
        )
        return report
    try:
        conn = connect(path, readonly=True)
        try:
            conn.create_function("ecoguard_day", 1, _day_of, deterministic=True)
            conn.create_function("ecoguard_gpu_key", 1, _gpu_key, deterministic=True)
            groups, total = _aggregate(conn, by, since)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"{path} is not a readable ecoguard ledger ({exc})") from None
    if by != "day":
        # Most energy first; ties in the order the groups first appear in the ledger (as the
        # stable sort over groups met in timestamp order did).
        groups.sort(key=lambda group: (-group[1]["energy_j"], group[2]))
    report["groups"] = [{"key": valid_utf8(str(key)), **summary} for key, summary, _ in groups]
    report["total"] = total
    if not total["calls"]:
        report["note"] = "no generate calls recorded in this period"
    overflowed = sum(_drop_non_finite(item) for item in (*report["groups"], total))
    if overflowed:
        report["note"] = (
            f"{overflowed} figure(s) overflowed (a sum beyond floating point, from rows with "
            "absurd values) and are shown as none"
        )
    return report


def _drop_non_finite(summary: dict[str, Any]) -> int:
    """Replace infinite or NaN figures in ``summary`` by None (JSON has no such numbers);
    returns how many there were."""
    bad = [
        name
        for name, value in summary.items()
        if isinstance(value, float) and not math.isfinite(value)
    ]
    for name in bad:
        summary[name] = None
    return len(bad)


def _energy(rows: list[dict[str, Any]]) -> float:
    return sum(r.get("energy_j") or 0.0 for r in rows)


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    energy_j = _energy(rows)
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
    # Measured J/token over the same calls as the reference, so the two compare like for like.
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
        "energy_kwh": energy_j / JOULES_PER_KWH,
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


def _fmt(value: float | None, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


def _fit(text: str, width: int) -> str:
    """``text`` in ``width`` characters, cut in the middle: a model's name is at the end of an
    id or a path (``/srv/models/.../SmolLM2-135M-Instruct``), so the end is kept whole where it
    fits, with as much of the start as room leaves."""
    if len(text) <= width:
        return text
    name = text.replace("\\", "/").rsplit("/", 1)[-1]
    tail = max((width - 3) * 2 // 3, min(len(name), width - 3))
    return text[: width - 3 - tail] + "..." + text[-tail:]


def render_text(report: dict[str, Any], *, width: int = 80) -> str:
    """A table and an ASCII bar chart of energy per group."""
    lines = [f"ecoguard report: {shown(report['ledger'])}"]
    lines.append(f"since {report['since'] or 'the beginning'}, by {report['by']}")
    if report.get("note"):
        lines.append(report["note"])
    if not report["groups"]:
        return "\n".join(lines) + "\n"
    # The group column widens for long model names (up to 48 characters), then cuts them in
    # the middle: the first 28 characters of a path or an id often hold no name at all.
    key_width = min(48, max(28, *(len(shown(str(g["key"]))) for g in report["groups"])))
    header = f"{'group':<{key_width}} {'calls':>6} {'tokens':>9} {'kWh':>10} {'$':>9} {'CO2 g':>9} {'J/tok':>8} {'ref J/tok':>10}  tier"
    lines += ["", header, "-" * len(header)]
    for item in [*report["groups"], {"key": "TOTAL", **report["total"]}]:
        ref = item["reference_j_per_token"]
        ref_text = _fmt(ref, ".3g") + (
            f" ({'/'.join(item['reference_tiers'])})" if ref is not None else ""
        )
        lines.append(
            f"{_fit(shown(str(item['key'])), key_width):<{key_width}} {item['calls']:>6} "
            f"{item['tokens']:>9} "
            f"{_fmt(item['energy_kwh'], '.6f'):>10} {_fmt(item['cost_usd'], '.4f'):>9} "
            f"{_fmt(item['co2_g'], '.2f'):>9} {_fmt(item['joules_per_token'], '.3g'):>8} "
            f"{ref_text:>10}  {'/'.join(item['tiers'])}"
        )
    if report["total"]["incomplete_calls"]:
        lines.append(
            f"{report['total']['incomplete_calls']} call(s) lost a GPU mid-way: their energy is a lower bound"
        )
    saved_j = report["total"].get("batching_saved_j")
    if saved_j:
        lines.append(
            f"batching saved an estimated {saved_j / JOULES_PER_KWH:.6f} kWh against running "
            "coalesced requests alone (derived: A800 batch sweep)"
        )
    lines += ["", "energy per group (kWh)"]
    peak = max((g["energy_kwh"] or 0.0) for g in report["groups"]) or 1.0
    bar_width = max(10, width - 46)
    for group in report["groups"]:
        kwh = group["energy_kwh"] or 0.0
        bar = "#" * max(1 if kwh > 0 else 0, round(kwh / peak * bar_width))
        lines.append(
            f"{_fit(shown(str(group['key'])), 24):<24} {bar:<{bar_width}} "
            f"{_fmt(group['energy_kwh'], '.4g')}"
        )
    return "\n".join(lines) + "\n"
