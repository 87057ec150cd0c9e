"""The event the guard publishes on ``ecoguard.events.findings`` for every finding it acts on."""

from __future__ import annotations

from dataclasses import dataclass

from ecoguard.deployment import Deployment
from ecoguard.findings import Finding, Location

ACTIONS_TAKEN: tuple[str, ...] = ("warn", "fix", "strict", "off")
SOURCES: tuple[str, ...] = ("load", "generate")


@dataclass(frozen=True, slots=True)
class FindingEvent:
    """A finding and what the guard did about it.

    ``action`` is what actually happened (``fix`` only when a change was applied; a fix the
    guard could not apply is reported as ``warn``); ``source`` is ``load`` (from_pretrained) or
    ``generate``; ``changed`` says what a fix changed; ``call_site`` is the user's line."""

    finding: Finding
    action: str
    source: str
    deployment: Deployment | None = None
    changed: str | None = None
    call_site: Location | None = None
