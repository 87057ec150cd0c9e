"""Findings and moods: what every rule yields and every back door shows.

A finding reads the same wherever the trap was found (a live process, a source file, a
question): the rule writes ``message`` and ``fix`` once; front doors only add ``location``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

# Stable rule ids (used in logs, metrics labels, JSON and SARIF). Never rename one.
RULE_IDS: tuple[str, ...] = (
    "int8-mixed",
    "small-model-quant",
    "fp8-eager",
    "nightly-build",
    "batch-size-one",
    "bf16-unsupported",
    "vram-overflow",
    "reference-deviation",
)

# Data tiers carried by every figure shown to a user.
TIERS: tuple[str, ...] = (
    "local",  # measured by `ecoguard bench` on this user's machine
    "measured",
    "reported",
    "derived",
    "extrapolated",
    "live",
    "simulated",
    "none",
)


# How certain each tier is, weakest first: a figure combined from several is only as good as
# its weakest input.
TIER_STRENGTH: dict[str, int] = {
    "none": 0,
    "simulated": 1,
    "extrapolated": 2,
    "derived": 3,
    "reported": 4,
    "measured": 5,
    "local": 6,
    "live": 7,
}


def weakest_tier(tiers: object) -> str:
    """The least certain tier of several figures (unknown tiers count as ``none``); ``none``
    when there are none."""
    listed = [t for t in tiers if t]  # type: ignore[attr-defined]
    return min(listed, key=lambda t: TIER_STRENGTH.get(t, 0)) if listed else "none"


class Mood(str, Enum):
    """The EcoLobster's mood: how wasteful a configuration is."""

    GREEN = "green"  # efficient
    YELLOW = "yellow"  # suboptimal
    ORANGE = "orange"  # energy trap
    RED = "red"  # catastrophic waste
    GRAY = "gray"  # unknown / unverified

    @property
    def rank(self) -> int:
        """Severity order for sorting and thresholds: gray < green < yellow < orange < red."""
        return _MOOD_RANK[self]

    @classmethod
    def worst(cls, moods: object) -> Mood:
        """The most severe mood of an iterable; GREEN when it is empty."""
        ranked = [Mood(m) for m in moods]  # type: ignore[attr-defined]
        return max(ranked, key=lambda m: m.rank) if ranked else cls.GREEN

    def __str__(self) -> str:
        return self.value


_MOOD_RANK = {Mood.GRAY: 0, Mood.GREEN: 1, Mood.YELLOW: 2, Mood.ORANGE: 3, Mood.RED: 4}


@dataclass(frozen=True, slots=True)
class Impact:
    """What a trap costs, from the estimator: extra energy in percent against the fixed
    configuration, and in dollars per month at ``monthly_requests``. ``tier`` and ``sources``
    say how that is known."""

    extra_energy_pct: float | None = None
    extra_usd_per_month: float | None = None
    extra_kwh_per_month: float | None = None
    monthly_requests: int | None = None
    tier: str = "none"
    sources: tuple[str, ...] = ()
    method: str | None = None
    # The same change as measured within each session that measured both sides (low, high),
    # when any did; the figure above is the ratio of the two configurations' chained figures.
    paired_range_pct: tuple[float, float] | None = None
    paired_sessions: int = 0


@dataclass(frozen=True, slots=True)
class Location:
    """Where a trap was found in source (audit) or which call site triggered it (guard)."""

    path: str
    line: int | None = None
    column: int | None = None
    # Notebooks: the 1-based index of the cell in the notebook; ``line`` is then the line
    # within that cell, as Jupyter shows it.
    cell: int | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form: path, line, column, and the cell only for a notebook."""
        out: dict[str, object] = {"path": self.path, "line": self.line, "column": self.column}
        if self.cell is not None:
            out["cell"] = self.cell
        return out


@dataclass(frozen=True, slots=True)
class Finding:
    """One trap matched. ``message`` is one sentence of why; ``fix`` is code to apply;
    ``changes_outputs`` says whether the fix may change model outputs (accuracy)."""

    rule: str
    mood: Mood
    title: str
    message: str
    fix: str
    fix_summary: str = ""
    impact: Impact | None = None
    evidence: tuple[str, ...] = ()  # reference row ids backing the claim
    changes_outputs: bool = False
    location: Location | None = None
    details: tuple[tuple[str, object], ...] = field(default_factory=tuple)

    def at(self, location: Location) -> Finding:
        return replace(self, location=location)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form shared by the CLI, MCP and ledger."""
        out: dict[str, object] = {
            "rule": self.rule,
            "mood": self.mood.value,
            "title": self.title,
            "message": self.message,
            "fix": self.fix,
            "fix_summary": self.fix_summary,
            "changes_outputs": self.changes_outputs,
            "evidence": list(self.evidence),
        }
        if self.impact is not None:
            out["impact"] = {
                "extra_energy_pct": self.impact.extra_energy_pct,
                "extra_usd_per_month": self.impact.extra_usd_per_month,
                "extra_kwh_per_month": self.impact.extra_kwh_per_month,
                "monthly_requests": self.impact.monthly_requests,
                "tier": self.impact.tier,
                "sources": list(self.impact.sources),
                "method": self.impact.method,
            }
        if self.location is not None:
            out["location"] = self.location.to_dict()
        if self.details:
            out["details"] = dict(self.details)
        return out
