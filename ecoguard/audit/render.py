"""Showing an audit: human text (grouped by file, worst first), JSON, and SARIF 2.1.0 for
GitHub code scanning and editors."""

from __future__ import annotations

import json
from typing import Any

from ecoguard import __version__
from ecoguard.audit.result import NOTE_KINDS, AuditNote, AuditResult, FileProblem
from ecoguard.findings import Finding, Impact, Location, Mood
from ecoguard.printable import shown, valid_utf8
from ecoguard.rules import RULES

SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://doi.org/10.5281/zenodo.19647290"

# SARIF has three result levels; a mood maps onto them by how urgently it should be fixed.
SARIF_LEVELS: dict[Mood, str] = {
    Mood.RED: "error",
    Mood.ORANGE: "warning",
    Mood.YELLOW: "note",
    Mood.GREEN: "note",
    Mood.GRAY: "note",
}


# -- names from the file system ----------------------------------------------------------


def _valid_json(value: Any) -> Any:
    """A JSON-ready structure whose strings all encode to UTF-8 (file names may not)."""
    if isinstance(value, str):
        return valid_utf8(value)
    if isinstance(value, dict):
        return {valid_utf8(str(k)): _valid_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_valid_json(v) for v in value]
    return value


# -- text ---------------------------------------------------------------------------------


def render_text(result: AuditResult, *, color: bool = False) -> str:
    """Findings and notes grouped by file; files with the worst moods first, and inside a file
    red and orange before yellow, then by line."""
    items_by_file: dict[str, list[Finding | AuditNote]] = {}
    for item in (*result.findings, *result.notes):
        assert item.location is not None
        items_by_file.setdefault(item.location.path, []).append(item)
    lines: list[str] = []
    ordered = sorted(
        items_by_file.items(),
        key=lambda kv: (-max(i.mood.rank for i in kv[1]), kv[0]),
    )
    for path, items in ordered:
        lines.append(_paint(shown(path), "1", color))
        items.sort(key=lambda i: (-i.mood.rank, *_position(i.location)))
        for item in items:
            lines.extend(_text_item(item, color))
        lines.append("")
    if result.problems:
        lines.append(_paint("files not audited:", "1", color))
        for problem in result.problems:
            lines.append(f"  {shown(_problem_text(problem))}")
        lines.append("")
    lines.append(_summary(result))
    return "\n".join(lines) + "\n"


def _text_item(item: Finding | AuditNote, color: bool) -> list[str]:
    assert item.location is not None
    where = _where(item.location)
    mood = _paint(f"{item.mood.value:<6}", _MOOD_COLORS.get(item.mood, "0"), color)
    if isinstance(item, Finding):
        head = f"  {where:<12} {mood} {item.rule}: {item.title}"
    else:
        head = f"  {where:<12} {mood} {item.kind} (audit note): {NOTE_KINDS[item.kind]}"
    out = [head, f"{'':15}{item.message}", f"{'':15}fix: {item.fix}"]
    loop = _loop_text(item)
    if loop:
        out.append(f"{'':15}loop: {loop}")
    if isinstance(item, Finding) and item.impact is not None:
        impact = _impact_text(item.impact)
        if impact:
            out.append(f"{'':15}impact: {impact}")
    return out


def _loop_text(item: Finding | AuditNote) -> str:
    """Where the loop that repeats a call is (``line 13``, ``cell 6, line 2``), as JSON's
    ``loop_line`` says; empty when the finding has none."""
    details = dict(item.details) if isinstance(item, Finding) else {}
    line = details.get("loop_line")
    if line is None:
        return ""
    cell = details.get("loop_cell")
    where = f"cell {cell}, line {line}" if cell is not None else f"line {line}"
    over = details.get("loop_over")
    kind = details.get("loop_kind", "loop")
    return f"{where} ({kind} over `{shown(str(over))}`)" if over else f"{where} ({kind})"


def _impact_text(impact: Impact) -> str:
    parts: list[str] = []
    if impact.extra_energy_pct is not None:
        parts.append(f"{impact.extra_energy_pct:+.0f}% energy")
    if impact.extra_usd_per_month is not None and impact.monthly_requests:
        parts.append(
            f"${impact.extra_usd_per_month:,.2f}/month at {impact.monthly_requests:,} requests"
        )
    if not parts:
        return ""
    return f"{', '.join(parts)} ({impact.tier})"


def _summary(result: AuditResult) -> str:
    counts = {m: 0 for m in (Mood.RED, Mood.ORANGE, Mood.YELLOW, Mood.GRAY)}
    for item in (*result.findings, *result.notes):
        counts[item.mood] = counts.get(item.mood, 0) + 1
    moods = ", ".join(f"{n} {m.value}" for m, n in counts.items() if n)
    text = (
        f"{len(result.files)} file(s) audited: {len(result.findings)} finding(s), "
        f"{len(result.notes)} note(s)"
    )
    if moods:
        text += f" ({moods})"
    if result.errors:
        text += f"; {len(result.errors)} file(s) could not be audited"
    if result.skipped:
        text += f"; {len(result.skipped)} path(s) skipped"
    return text


def _problem_text(problem: FileProblem) -> str:
    where = problem.path
    if problem.cell is not None:
        where += f" cell {problem.cell}"
    if problem.line is not None:
        where += f":{problem.line}"
    return f"{where}: {problem.kind}: {problem.message}"


def _where(location: Location) -> str:
    base = f"{location.line or 0}:{location.column or 0}"
    return f"cell {location.cell} {base}" if location.cell is not None else base


def _position(location: Location | None) -> tuple[int, int, int]:
    if location is None:
        return (0, 0, 0)
    return (location.cell or 0, location.line or 0, location.column or 0)


_MOOD_COLORS = {Mood.RED: "31;1", Mood.ORANGE: "33;1", Mood.YELLOW: "33", Mood.GRAY: "2"}


def _paint(text: str, code: str, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color else text


# -- JSON ---------------------------------------------------------------------------------


def render_json(result: AuditResult) -> str:
    return json.dumps(_valid_json(result.to_dict()), indent=2, sort_keys=False, default=str) + "\n"


# -- SARIF --------------------------------------------------------------------------------


def to_sarif(result: AuditResult) -> dict[str, Any]:
    """The audit as a SARIF 2.1.0 log: one run, every rule described (guard rules and audit
    notes), one result per finding or note, and files that could not be read as tool
    execution notifications."""
    descriptors = _rule_descriptors() + _note_descriptors()
    index = {d["id"]: i for i, d in enumerate(descriptors)}
    results = [
        _sarif_result(
            finding.rule,
            index[finding.rule],
            finding.mood,
            finding.message,
            finding.fix,
            finding.location,
            impact=finding.impact,
        )
        for finding in result.findings
    ]
    results.extend(
        _sarif_result(note.kind, index[note.kind], note.mood, note.message, note.fix, note.location)
        for note in result.notes
    )
    driver = {
        "name": "ecoguard",
        "version": __version__,
        "informationUri": INFORMATION_URI,
        "rules": descriptors,
    }
    invocation = {
        "executionSuccessful": not result.errors,
        "toolExecutionNotifications": _notifications(result.problems),
    }
    run = {
        "tool": {"driver": driver},
        "invocations": [invocation],
        "columnKind": "unicodeCodePoints",
        "results": results,
    }
    return {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _rule_descriptors() -> list[dict[str, Any]]:
    """A SARIF reportingDescriptor per guard rule, in RULES order."""
    return [
        {
            "id": spec.id,
            "name": _pascal(spec.id),
            "shortDescription": {"text": spec.title},
            "fullDescription": {"text": f"{spec.summary}. {spec.why}".strip()},
            "help": {"text": f"Fix: {spec.fix}", "markdown": f"**Fix:** `{spec.fix}`"},
            "helpUri": INFORMATION_URI,
            "properties": {
                "tags": ["energy", "performance"],
                "changesOutputs": spec.changes_outputs,
            },
        }
        for spec in RULES.values()
    ]


def _note_descriptors() -> list[dict[str, Any]]:
    """A SARIF reportingDescriptor per audit-only note kind."""
    return [
        {
            "id": kind,
            "name": _pascal(kind.split("/", 1)[1]),
            "shortDescription": {"text": title},
            "fullDescription": {"text": f"Audit-only note (no runtime rule): {title}."},
            "help": {"text": title},
            "properties": {"tags": ["energy", "audit-note"]},
        }
        for kind, title in NOTE_KINDS.items()
    ]


def _notifications(problems: list[FileProblem]) -> list[dict[str, Any]]:
    """Files that could not be audited, as tool execution notifications."""
    return [
        {
            "level": "error" if problem.is_error else "note",
            "message": {"text": f"{problem.kind}: {problem.message}"},
            "locations": [
                _sarif_location(Location(problem.path, problem.line, None, problem.cell))
            ],
            "descriptor": {"id": problem.kind},
        }
        for problem in problems
    ]


def render_sarif(result: AuditResult) -> str:
    return json.dumps(_valid_json(to_sarif(result)), indent=2) + "\n"


def _sarif_result(
    rule_id: str,
    rule_index: int,
    mood: Mood,
    message: str,
    fix: str,
    location: Location | None,
    *,
    impact: Impact | None = None,
) -> dict[str, Any]:
    text = f"{message} Fix: {fix}"
    if location is not None and location.cell is not None:
        text = f"(cell {location.cell}, line {location.line}) {text}"
    properties: dict[str, Any] = {"mood": mood.value, "fix": fix}
    if impact is not None:
        properties["impact"] = {
            "extraEnergyPct": impact.extra_energy_pct,
            "extraUsdPerMonth": impact.extra_usd_per_month,
            "monthlyRequests": impact.monthly_requests,
            "tier": impact.tier,
        }
    out: dict[str, Any] = {
        "ruleId": rule_id,
        "ruleIndex": rule_index,
        "level": SARIF_LEVELS[mood],
        "message": {"text": text},
        "properties": properties,
    }
    if location is not None:
        out["locations"] = [_sarif_location(location)]
        if location.line is not None:
            # Stable across runs and line moves elsewhere in the file: code scanning uses it to
            # match a result to the one it saw before.
            out["partialFingerprints"] = {
                "ecoguard/v1": f"{rule_id}:{location.path}:{location.cell or 0}:{location.line}"
            }
    return out


def _sarif_location(location: Location) -> dict[str, Any]:
    artifact: dict[str, Any] = {"uri": _uri(location.path)}
    if not location.path.startswith("/"):
        artifact["uriBaseId"] = "%SRCROOT%"  # relative paths resolve against the checkout
    physical: dict[str, Any] = {"artifactLocation": artifact}
    # In a notebook the line counts inside a cell, not the JSON file, so no region is given
    # (the message names the cell and line instead).
    if location.cell is None and location.line is not None and location.line >= 1:
        region: dict[str, Any] = {"startLine": location.line}
        if location.column is not None and location.column >= 1:
            region["startColumn"] = location.column
        physical["region"] = region
    out: dict[str, Any] = {"physicalLocation": physical}
    if location.cell is not None:
        out["properties"] = {"cell": location.cell, "cellLine": location.line}
    return out


def _uri(path: str) -> str:
    from urllib.parse import quote

    # The file name's own bytes, percent-encoded (a name that is not UTF-8 keeps its bytes).
    raw = path.replace("\\", "/").encode("utf-8", "surrogateescape")
    quoted = quote(raw, safe="/@-._~")
    return f"file://{quoted}" if quoted.startswith("/") else quoted


def _pascal(text: str) -> str:
    return "".join(part.capitalize() for part in text.replace("/", "-").split("-"))
