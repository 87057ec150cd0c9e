"""The advisor's seams to the knowledge estimator and the rules, memoised per answer: one answer
asks for the same cell several times (compare baseline, optimize candidates, the optimized
column, the batching advice), so within an answer each (deployment, settings, volume) is
estimated and judged once.

The memo is a :class:`Cells` object that ``answers.answer`` makes for each answer and activates
for its duration (a context variable, so concurrent answers in threads or tasks never share
one); it is dropped with the answer. Outside an answer (a protocol called directly) nothing is
memoised. Importing the knowledge package reads no file: an answer that never estimates never
loads the reference data.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.findings import Finding
from ecoguard.knowledge.estimator import Estimate, estimate
from ecoguard.rules import evaluate


@dataclass
class Cells:
    """One answer's memo: each estimate and the rule findings per (deployment,
    settings[, volume])."""

    estimates: dict[tuple[Deployment, str, int | None], Estimate] = field(default_factory=dict)
    rules: dict[tuple[Deployment, str], tuple[Finding, ...]] = field(default_factory=dict)

    @contextmanager
    def active(self) -> Iterator[Cells]:
        """Memoise the estimates and rules asked for inside this block in this object."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


_ACTIVE: ContextVar[Cells | None] = ContextVar("ecoguard_advisor_cells", default=None)


def _hashable(key: object) -> bool:
    """A deployment with an unhashable field (a list in its details) is computed, not memoised."""
    try:
        hash(key)
    except TypeError:
        return False
    return True


def run_estimate(
    deployment: Deployment, settings: Settings, requests_per_month: int | None
) -> Estimate:
    """The knowledge estimator's record for the deployment (tier ``none`` when it has
    nothing), memoised in the active answer's cells."""
    key = (deployment, repr(settings), requests_per_month)
    cells = _ACTIVE.get() if _hashable(key) else None
    if cells is not None and key in cells.estimates:
        return cells.estimates[key]
    est = estimate(deployment, settings=settings, requests_per_month=requests_per_month)
    if cells is not None:
        cells.estimates[key] = est
    return est


def run_rules(deployment: Deployment, settings: Settings) -> list[Finding]:
    """The rules on the deployment, memoised in the active answer's cells. A rules failure is a
    bug and raises (the CLI says it in one line)."""
    key = (deployment, repr(settings))
    cells = _ACTIVE.get() if _hashable(key) else None
    if cells is not None and key in cells.rules:
        return list(cells.rules[key])
    found = tuple(evaluate(deployment, settings=settings))
    if cells is not None:
        cells.rules[key] = found
    return list(found)
