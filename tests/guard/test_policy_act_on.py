"""Policy.act_on: the one strict/fix/warn loop every guard path uses."""

from __future__ import annotations

import warnings

import pytest

from ecoguard import events
from ecoguard.config import Settings
from ecoguard.errors import EnergyTrapError
from ecoguard.findings import Finding, Location, Mood
from ecoguard.guard.policy import NO_FIX, FixOutcome, Policy

SITE = (Location(path="app.py", line=7), "app")


def _finding(rule: str) -> Finding:
    return Finding(
        rule=rule,
        mood=Mood.ORANGE,
        title=rule,
        message=f"{rule} wastes energy",
        fix="do x",
        fix_summary="x",
    )


@pytest.fixture
def published():
    seen = []
    unsubscribe = events.findings.subscribe(seen.append)
    yield seen
    unsubscribe()


def _act(policy: Policy, findings, fix=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        policy.act_on(
            findings, source="load", deployment=None, where="the test", fix=fix, call_site=SITE
        )


def test_strict_findings_are_refused_together_before_any_fix(published):
    policy = Policy(Settings(mode="fix", rules={"a": "strict", "c": "strict"}))
    fixed = []

    def fix(finding):
        fixed.append(finding.rule)
        return FixOutcome(changed="changed")

    with pytest.raises(EnergyTrapError) as refusal:
        _act(policy, [_finding("a"), _finding("b"), _finding("c")], fix)
    assert fixed == []  # nothing changed for a call that is refused
    assert [f.rule for f in refusal.value.findings] == ["a", "c"]
    assert "refused the test" in str(refusal.value)
    assert [(e.finding.rule, e.action) for e in published] == [("a", "strict"), ("c", "strict")]


def test_fix_warn_deferred_and_why_not(published):
    policy = Policy(Settings(mode="fix", rules={"w": "warn"}))
    outcomes = {
        "changed": FixOutcome(changed="set it"),
        "no-way": FixOutcome(why_not="no automatic fix"),
        "later": FixOutcome(deferred=True),
        "nothing": NO_FIX,
    }
    asked = []

    def fix(finding):
        asked.append(finding.rule)
        return outcomes[finding.rule]

    _act(policy, [_finding(rule) for rule in (*outcomes, "w")], fix)
    assert asked == list(outcomes)  # the warn-only rule is never given to the fixer
    got = {e.finding.rule: (e.action, e.changed, e.finding.fix_summary) for e in published}
    assert got == {
        "changed": ("fix", "set it", "x"),
        "no-way": ("warn", None, "x (no automatic fix)"),
        "nothing": ("warn", None, "x"),
        "w": ("warn", None, "x"),
    }


def test_without_a_fixer_a_fix_action_is_reported_as_warn(published):
    _act(Policy(Settings(mode="fix")), [_finding("a")])
    assert [(e.finding.rule, e.action) for e in published] == [("a", "warn")]
