"""What an audit returns: findings (rule ids shared with the runtime guard), audit-only notes,
and per-file problems, so one bad file never hides the others."""

from __future__ import annotations

from dataclasses import dataclass, field

from ecoguard.findings import Finding, Location, Mood

# Audit-only observations that no runtime rule covers. They live in ``AuditResult.notes``,
# never in ``findings``, and their ids sit in their own ``audit/`` namespace so no consumer
# mistakes one for a rule id of the guard.
NOTE_KINDS: dict[str, str] = {
    "audit/transformers5-removed-kwarg": (
        "load_in_8bit= / load_in_4bit= passed straight to from_pretrained: removed in transformers 5"
    ),
    "audit/kv-cache-disabled": (
        "use_cache=False: every new token recomputes attention over the whole prefix"
    ),
}


@dataclass(frozen=True, slots=True)
class AuditNote:
    """An audit-only observation: ``kind`` is a key of NOTE_KINDS (never a rule id). ``mood``
    places it on the same severity scale as findings, so ``--severity`` gates both."""

    kind: str
    mood: Mood
    message: str
    fix: str
    location: Location

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "mood": self.mood.value,
            "title": NOTE_KINDS[self.kind],
            "message": self.message,
            "fix": self.fix,
            "location": self.location.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class FileProblem:
    """A file the audit could not (fully) read. ``kind``: ``syntax-error``, ``decode-error``,
    ``too-large``, ``unreadable``, ``not-found``, ``bad-notebook``, ``time-limit`` (these are
    errors: the audit is incomplete, exit 2) or ``symlink-loop``, ``symlink-outside`` (skipped on purpose)."""

    path: str
    kind: str
    message: str
    line: int | None = None
    cell: int | None = None

    @property
    def is_error(self) -> bool:
        return self.kind not in SKIP_KINDS

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"path": self.path, "kind": self.kind, "message": self.message}
        if self.line is not None:
            out["line"] = self.line
        if self.cell is not None:
            out["cell"] = self.cell
        return out


# ``template`` (an unrendered Helm chart) and ``needs-dependency`` (YAML without PyYAML) are
# launch files skipped on purpose, with the way to audit them in the message.
SKIP_KINDS = frozenset({"symlink-loop", "symlink-outside", "template", "needs-dependency"})


@dataclass(slots=True)
class AuditResult:
    """Everything one audit found. ``files`` lists the paths audited (display form)."""

    files: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[AuditNote] = field(default_factory=list)
    problems: list[FileProblem] = field(default_factory=list)

    @property
    def errors(self) -> list[FileProblem]:
        """Problems that left a file unaudited (exit code 2)."""
        return [p for p in self.problems if p.is_error]

    @property
    def skipped(self) -> list[FileProblem]:
        return [p for p in self.problems if not p.is_error]

    def extend(self, other: AuditResult) -> None:
        self.files.extend(other.files)
        self.findings.extend(other.findings)
        self.notes.extend(other.notes)
        self.problems.extend(other.problems)

    def sort(self) -> AuditResult:
        """Order by file, then line, then most severe first: stable output for diffs and tests."""
        self.findings.sort(key=lambda f: (*_location_key(f.location), -f.mood.rank, f.rule))
        self.notes.sort(key=lambda n: (*_location_key(n.location), -n.mood.rank, n.kind))
        self.problems.sort(key=lambda p: (p.path, p.cell or 0, p.line or 0, p.kind))
        return self

    def at_or_above(self, severity: Mood) -> int:
        """How many findings and notes reach ``severity`` (gray never gates)."""
        return sum(1 for item in (*self.findings, *self.notes) if item.mood.rank >= severity.rank)

    def exit_code(self, severity: Mood = Mood.YELLOW) -> int:
        """2 when a file could not be audited, else 1 when something reaches ``severity``,
        else 0. An incomplete audit outranks findings: CI must not pass a file it never read."""
        if self.errors:
            return 2
        return 1 if self.at_or_above(severity) else 0

    def to_dict(self) -> dict[str, object]:
        return {
            "files": list(self.files),
            "findings": [f.to_dict() for f in self.findings],
            "notes": [n.to_dict() for n in self.notes],
            "errors": [p.to_dict() for p in self.errors],
            "skipped": [p.to_dict() for p in self.skipped],
            "summary": {
                "files": len(self.files),
                "findings": len(self.findings),
                "notes": len(self.notes),
                "errors": len(self.errors),
                "by_mood": _count_moods(self),
            },
        }


def _count_moods(result: AuditResult) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in (*result.findings, *result.notes):
        counts[item.mood.value] = counts.get(item.mood.value, 0) + 1
    return counts


def _location_key(location: Location | None) -> tuple[str, int, int, int]:
    if location is None:
        return ("", 0, 0, 0)
    return (
        location.path,
        location.cell or 0,
        location.line or 0,
        location.column or 0,
    )
