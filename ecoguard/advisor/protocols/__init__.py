"""The advisor's protocols: optimize, compare, estimate, diagnose, audit (one module each:
``optimizing``, ``comparing``, ``estimating``, ``diagnosing``, ``auditing``; shared parts in
``base``).

Each is a library function that takes a :class:`Request` (the question, the deployment framed
from it and what the assembly derived; plus plain options) and returns an
:class:`AdvisorResult` whose ``to_dict()`` is the JSON the CLI, MCP server and tests read. Every
figure comes from the knowledge estimator (``ecoguard.knowledge.estimator.estimate``) with its
tier; every judgement comes from the rules (``ecoguard.rules.evaluate``). Nothing here invents a
number: when the estimator has no basis, the cell says so (tier ``none``).
"""

from __future__ import annotations

from ecoguard.advisor.estimates import run_estimate
from ecoguard.advisor.protocols.auditing import audit
from ecoguard.advisor.protocols.base import (
    MAX_REFERENCE_BATCH,
    TIE_FRACTION,
    AdvisorResult,
    Request,
    cite,
    figure,
    use_for_batch_size,
    with_precision,
)
from ecoguard.advisor.protocols.comparing import compare, compare_across_models
from ecoguard.advisor.protocols.diagnosing import diagnose, general_trap_rule, general_traps
from ecoguard.advisor.protocols.estimating import estimate
from ecoguard.advisor.protocols.optimizing import optimize

__all__ = [
    "MAX_REFERENCE_BATCH",
    "TIE_FRACTION",
    "AdvisorResult",
    "Request",
    "audit",
    "cite",
    "compare",
    "compare_across_models",
    "diagnose",
    "estimate",
    "figure",
    "general_trap_rule",
    "general_traps",
    "optimize",
    "run_estimate",
    "use_for_batch_size",
    "with_precision",
]
