"""The rules: pure judgements of a Deployment, the same for every front door.

``evaluate(deployment)`` runs every rule (or ``only`` some) and returns the findings, most
severe first. ``explain(rule_id)`` says what a rule checks, why, the fix and the reference rows
behind it. Nothing here imports torch, transformers, pynvml or prometheus_client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.errors import UsageError
from ecoguard.faults import record_fault
from ecoguard.findings import RULE_IDS, Finding
from ecoguard.knowledge import reference_rows
from ecoguard.rules.checks import (
    RuleContext,
    SmallModelThreshold,
    check_batch_size_one,
    check_bf16_unsupported,
    check_fp8_eager,
    check_int8_mixed,
    check_nightly_build,
    check_reference_deviation,
    check_small_model_quant,
    check_vram_overflow,
    memory_need_gb,
    nightly_versions,
    small_model_threshold,
    unquantized_dtype,
)
from ecoguard.rules.table import (
    BS1_SUSTAINED_CALLS,
    PUBLISHED_SMALL_MODEL_BOUND_B,
    ROWS,
    RuleRow,
)

Check = Callable[[Deployment, RuleContext], "Finding | None"]


@dataclass(frozen=True, slots=True)
class RuleSpec(RuleRow):
    """One rule of ``RULES``: its row of the rule table and the check that judges it."""

    check: Check = field(kw_only=True)


_CHECKS: Mapping[str, Check] = {
    "int8-mixed": check_int8_mixed,
    "small-model-quant": check_small_model_quant,
    "fp8-eager": check_fp8_eager,
    "nightly-build": check_nightly_build,
    "batch-size-one": check_batch_size_one,
    "bf16-unsupported": check_bf16_unsupported,
    "vram-overflow": check_vram_overflow,
    "reference-deviation": check_reference_deviation,
}


def _spec(row: RuleRow) -> RuleSpec:
    return RuleSpec(
        **{f.name: getattr(row, f.name) for f in fields(RuleRow)}, check=_CHECKS[row.id]
    )


RULES: Mapping[str, RuleSpec] = MappingProxyType(
    {rule_id: _spec(row) for rule_id, row in ROWS.items()}
)
assert tuple(RULES) == RULE_IDS and set(_CHECKS) == set(RULES), "one check per rule of RULE_IDS"


def _rule(rule_id: str) -> RuleSpec:
    """The rule ``rule_id``; UsageError naming the accepted ids for an unknown one."""
    spec = RULES.get(rule_id)
    if spec is None:
        raise UsageError(f"unknown rule {rule_id!r}; accepted: {', '.join(RULE_IDS)}")
    return spec


def _check_ids(ids: Iterable[str]) -> list[str]:
    chosen = list(ids)
    for rule_id in chosen:
        _rule(rule_id)
    return chosen


def evaluate(
    deployment: Deployment,
    *,
    settings: Settings | None = None,
    only: Iterable[str] | None = None,
    measured_j_per_token: float | None = None,
) -> list[Finding]:
    """Every rule's finding for ``deployment``, most severe mood first (ties in RULES order).

    ``only`` limits the rules run (UsageError on an unknown id). Rules whose action in
    ``settings`` is ``off`` are skipped. ``measured_j_per_token`` feeds ``reference-deviation``.
    A rule that raises is counted as a fault and skipped: one broken rule never hides the others.
    """
    settings = settings or Settings()
    ids = _check_ids(only) if only is not None else list(RULES)
    context = RuleContext(settings=settings, measured_j_per_token=measured_j_per_token)
    findings: list[Finding] = []
    for rule_id in ids:
        if settings.action_for(rule_id) == "off":
            continue
        try:
            finding = RULES[rule_id].check(deployment, context)
        except Exception as exc:
            record_fault(f"rules.{rule_id}", exc)
            continue
        if finding is not None:
            findings.append(finding)
    order = {rule_id: index for index, rule_id in enumerate(RULES)}
    findings.sort(key=lambda f: (-f.mood.rank, order[f.rule]))
    return findings


_EVIDENCE_LIMIT = 8


def evidence_row(row: Any) -> dict[str, Any]:
    """A reference row as a trap's evidence: its id, GPU, model, precision, batch size,
    J per 1k tokens, tier and source file (what ``explain`` and diagnose show)."""
    return {
        "id": row.id,
        "gpu": row.gpu,
        "model": row.model_id,
        "precision": row.precision,
        "batch_size": row.batch_size,
        "energy_j_per_1k": row.energy_j_per_1k,
        "tier": row.tier,
        "source": row.source,
    }


def explain(rule_id: str) -> dict[str, Any]:
    """What ``rule_id`` checks, why, the fix, and the reference rows behind it (ids, figures,
    tiers). UsageError for an unknown id."""
    spec = _rule(rule_id)
    rows: list[dict[str, Any]] = []
    if spec.evidence is not None:
        try:
            for row in reference_rows():
                if row.tier in ("measured", "reported") and spec.evidence(row):
                    rows.append(evidence_row(row))
                    if len(rows) >= _EVIDENCE_LIMIT:
                        break
        except Exception as exc:  # knowledge tables not available: explain without rows
            record_fault("rules.explain", exc)
    return {
        "id": spec.id,
        "title": spec.title,
        "what": spec.summary,
        "why": spec.why,
        "fix": spec.fix,
        "changes_outputs": spec.changes_outputs,
        "stage": spec.stage,
        "evidence": rows,
    }


__all__ = [
    "BS1_SUSTAINED_CALLS",
    "PUBLISHED_SMALL_MODEL_BOUND_B",
    "RULES",
    "RuleContext",
    "RuleRow",
    "RuleSpec",
    "SmallModelThreshold",
    "evaluate",
    "explain",
    "memory_need_gb",
    "nightly_versions",
    "small_model_threshold",
    "unquantized_dtype",
]
