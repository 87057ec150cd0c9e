"""The advisor: answers energy questions (free text in English or Chinese, or flags) from the
reference data with the five protocols: optimize, compare, estimate, diagnose, audit.

Importing this package loads nothing heavy; the names below resolve on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    "advise": "ecoguard.advisor.answers",
    "Answer": "ecoguard.advisor.answers",
    "parse_question": "ecoguard.advisor.parse",
    "Question": "ecoguard.advisor.question",
    "AdvisorResult": "ecoguard.advisor.protocols",
    "Request": "ecoguard.advisor.protocols",
    "optimize": "ecoguard.advisor.protocols",
    "compare": "ecoguard.advisor.protocols",
    "compare_across_models": "ecoguard.advisor.protocols",
    "estimate": "ecoguard.advisor.protocols",
    "diagnose": "ecoguard.advisor.protocols",
    "audit": "ecoguard.advisor.protocols",
    "render": "ecoguard.advisor.rendering",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ecoguard.advisor' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
