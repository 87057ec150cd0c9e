"""Policy: what the guard does with a finding (warn, fix, strict), and how it says so.

``warn`` logs the lobster alert on logger ``ecoguard`` and issues an ``EnergyTrapWarning`` once
per rule and user call site; ``fix`` applies the correction (see ``ecoguard.guard.fixes``) and
logs what changed; ``strict`` raises ``EnergyTrapError``. Every finding acted on is published
as a ``FindingEvent`` so metrics and the ledger can count it.
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ecoguard import events
from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.errors import EnergyTrapError, EnergyTrapWarning
from ecoguard.faults import record_fault
from ecoguard.findings import Finding, Location
from ecoguard.guard.records import FindingEvent
from ecoguard.voice import render_alert

_log = logging.getLogger("ecoguard")

# Frames from these modules are machinery between the user's line and the guard.
_MACHINERY_PREFIXES: tuple[str, ...] = (
    "ecoguard.",
    "wrapt",
    "transformers",
    "torch",
    "accelerate",
    "contextlib",
    "functools",
    "threading",
    "concurrent.",
)


@dataclass(frozen=True, slots=True)
class FixOutcome:
    """What a fixer did with one finding whose action is ``fix``.

    ``changed``: what was changed (the finding is reported as ``fix``); ``why_not``: why nothing
    was (appended to the finding's fix summary, reported as ``warn``); ``deferred``: the caller
    reports it later itself (a fix that can only be applied once the weights are loaded)."""

    changed: str | None = None
    why_not: str | None = None
    deferred: bool = False


NO_FIX = FixOutcome()

Fixer = Callable[[Finding], FixOutcome]


def user_call_site(skip: int = 1) -> tuple[Location, str]:
    """(location, module name) of the first frame outside ecoguard/wrapt/transformers/torch."""
    frame = sys._getframe(skip)
    fallback = frame
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(_MACHINERY_PREFIXES):
            break
        frame = frame.f_back
    frame = frame or fallback
    location = Location(path=frame.f_code.co_filename, line=frame.f_lineno)
    return location, frame.f_globals.get("__name__", "")


class Policy:
    """Applies settings to findings. One instance per ``install()``; thread-safe dedupe."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._warned: set[tuple[str, str, int | None]] = set()
        self._lock = threading.Lock()

    def action_for(self, rule_id: str) -> str:
        return self.settings.action_for(rule_id)

    def _first_time(self, rule_id: str, location: Location) -> bool:
        key = (rule_id, location.path, location.line)
        with self._lock:
            if key in self._warned:
                return False
            self._warned.add(key)
            return True

    def report(
        self,
        finding: Finding,
        *,
        action: str,
        source: str,
        deployment: Deployment | None,
        changed: str | None = None,
        call_site: tuple[Location, str] | None = None,
    ) -> None:
        """Log + warn (once per rule and call site) and publish the event. Never raises."""
        try:
            location, module = call_site or user_call_site(2)
            finding = finding.at(location)
            if self._first_time(finding.rule, location) or action == "strict":
                text = render_alert(
                    finding,
                    action=action,
                    deployment=deployment,
                    changed=changed,
                    settings=self.settings,
                )
                _log.warning(text)
                if action == "warn":
                    warnings.warn_explicit(
                        f"[{finding.rule}] {finding.message} Fix: {finding.fix}",
                        EnergyTrapWarning,
                        location.path,
                        location.line or 0,
                        module=module or None,
                    )
            events.findings.publish(
                FindingEvent(
                    finding=finding,
                    action=action,
                    source=source,
                    deployment=deployment,
                    changed=changed,
                    call_site=location,
                )
            )
        except Exception as exc:
            record_fault("guard.report", exc)

    def act_on(
        self,
        findings: Sequence[Finding],
        *,
        source: str,
        deployment: Deployment | None,
        where: str,
        fix: Fixer | None = None,
        call_site: tuple[Location, str] | None = None,
    ) -> None:
        """Do what the settings say with ``findings``, in their order.

        ``strict``: every strict finding is reported, then all are refused at once with an
        ``EnergyTrapError`` naming ``where``, before any fix is applied. ``fix``: ``fix(finding)``
        applies the correction and says what it did (:class:`FixOutcome`); with no fixer, or
        nothing changed, the finding is reported as ``warn``. ``warn``: reported."""
        refused = [f for f in findings if self.action_for(f.rule) == "strict"]
        if refused:
            for finding in refused:
                self.report(
                    finding,
                    action="strict",
                    source=source,
                    deployment=deployment,
                    call_site=call_site,
                )
            raise self.refuse(refused, where=where)
        for finding in findings:
            outcome = NO_FIX
            if fix is not None and self.action_for(finding.rule) == "fix":
                outcome = fix(finding)
            if outcome.deferred:
                continue
            if outcome.changed is None and outcome.why_not is not None:
                finding = replace(finding, fix_summary=f"{finding.fix_summary} ({outcome.why_not})")
            self.report(
                finding,
                action="fix" if outcome.changed else "warn",
                source=source,
                deployment=deployment,
                changed=outcome.changed,
                call_site=call_site,
            )

    def refuse(self, findings: Sequence[Finding], *, where: str) -> EnergyTrapError:
        """The error strict mode raises, naming each trap and its fix."""
        lines = [f"ecoguard strict mode refused {where}:"]
        for finding in findings:
            lines.append(f"  [{finding.rule}] {finding.message} Fix: {finding.fix}")
        return EnergyTrapError("\n".join(lines), findings=list(findings))
