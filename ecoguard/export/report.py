"""``ecoguard report``: what the ledger recorded, grouped by model, day or GPU.

Per group: requests, tokens, energy (kWh), cost ($), CO2 (g), and joules per token measured beside
the reference figure for the same configurations (token-weighted over the calls that had one), with
the tiers of both. Text output ends with an ASCII bar chart of energy per group.
"""

from __future__ import annotations

import datetime as _dt
import re
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

from ecoguard.errors import UsageError

GROUPINGS: tuple[str, ...] = ("model", "day", "gpu")
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$", re.IGNORECASE)
_UNIT_S = {"m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
SINCE_FORMATS = "7d, 24h, 30m, 2w (ago) or a local date/time 2026-11-01, 2026-11-01T08:00"
JOULES_PER_KWH = 3.6e6


def parse_since(text: str, *, now: float | None = None) -> float:
    """``--since`` as epoch seconds. Relative (``7d``, ``24h``, ``30m``, ``2w``) or ISO local date."""
    now = _dt.datetime.now().timestamp() if now is None else now
    match = _RELATIVE.match(text or "")
    if match:
        return now - float(match.group(1)) * _UNIT_S[match.group(2).lower()]
    try:
        when = _dt.datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError):
        raise UsageError(f"bad --since {text!r}; accepted: {SINCE_FORMATS}") from None
    return when.timestamp()


def _group_key(row: dict[str, Any], by: str) -> str:
    if by == "model":
        return row.get("model_name") or "(unknown model)"
    if by == "day":
        return _dt.datetime.fromtimestamp(row["timestamp"]).strftime("%Y-%m-%d")
    names = row.get("gpu_names") or []
    return ", ".join(names) if names else "(no GPU)"


def build_report(
    ledger: str | Path, *, since: float | None = None, by: str = "model"
) -> dict[str, Any]:
    """Aggregate the ledger at ``ledger``. Missing file -> an empty report with a note."""
    from ecoguard.export.ledger import read_rows

    if by not in GROUPINGS:
        raise UsageError(f"unknown grouping {by!r}; accepted: {', '.join(GROUPINGS)}")
    path = Path(ledger)
    report: dict[str, Any] = {
        "ledger": str(path),
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
        rows = read_rows(path, since=since)
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"{path} is not a readable ecoguard ledger ({exc})") from None
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[_group_key(row, by)].append(row)
    ordered = sorted(groups.items(), key=lambda kv: kv[0] if by == "day" else -_energy(kv[1]))
    report["groups"] = [{"key": key, **_summary(items)} for key, items in ordered]
    report["total"] = _summary(rows)
    if not rows:
        report["note"] = "no generate calls recorded in this period"
    return report


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
    }


def _fmt(value: float | None, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


def render_text(report: dict[str, Any], *, width: int = 80) -> str:
    """A table and an ASCII bar chart of energy per group."""
    lines = [f"ecoguard report: {report['ledger']}"]
    lines.append(f"since {report['since'] or 'the beginning'}, by {report['by']}")
    if report.get("note"):
        lines.append(report["note"])
    if not report["groups"]:
        return "\n".join(lines) + "\n"
    header = f"{'group':<28} {'calls':>6} {'tokens':>9} {'kWh':>10} {'$':>9} {'CO2 g':>9} {'J/tok':>8} {'ref J/tok':>10}  tier"
    lines += ["", header, "-" * len(header)]
    for item in [*report["groups"], {"key": "TOTAL", **report["total"]}]:
        ref = item["reference_j_per_token"]
        ref_text = _fmt(ref, ".3g") + (
            f" ({'/'.join(item['reference_tiers'])})" if ref is not None else ""
        )
        lines.append(
            f"{str(item['key'])[:28]:<28} {item['calls']:>6} {item['tokens']:>9} "
            f"{item['energy_kwh']:>10.6f} {_fmt(item['cost_usd'], '.4f'):>9} "
            f"{_fmt(item['co2_g'], '.2f'):>9} {_fmt(item['joules_per_token'], '.3g'):>8} "
            f"{ref_text:>10}  {'/'.join(item['tiers'])}"
        )
    if report["total"]["incomplete_calls"]:
        lines.append(
            f"{report['total']['incomplete_calls']} call(s) lost a GPU mid-way: their energy is a lower bound"
        )
    lines += ["", "energy per group (kWh)"]
    peak = max(g["energy_kwh"] for g in report["groups"]) or 1.0
    bar_width = max(10, width - 46)
    for group in report["groups"]:
        bar = "#" * max(
            1 if group["energy_kwh"] > 0 else 0, round(group["energy_kwh"] / peak * bar_width)
        )
        lines.append(f"{str(group['key'])[:24]:<24} {bar:<{bar_width}} {group['energy_kwh']:.4g}")
    return "\n".join(lines) + "\n"
