"""ecoguard: catch GPU energy traps in LLM serving and measure joules per token.

``import ecoguard`` has no side effects: no threads, no patches, no heavy imports (torch,
transformers, pynvml and prometheus_client are never imported here). Names below are resolved
lazily on first use. ``import ecoguard.auto`` is the one-line, side-effecting entry point.
"""

from __future__ import annotations

import logging

from ecoguard._lazy import lazy_exports
from ecoguard.config import Settings
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec, QuantSpec, SoftwareVersions
from ecoguard.errors import (
    EcoguardError,
    EnergyTrapError,
    EnergyTrapWarning,
    UnmeasuredWarning,
    UsageError,
)
from ecoguard.events import on_finding, on_record
from ecoguard.findings import Finding, Mood

__version__ = "0.1.0"

# The library logs on "ecoguard"; applications decide where it goes.
logging.getLogger("ecoguard").addHandler(logging.NullHandler())

# Public names implemented in submodules, imported on first attribute access.
_LAZY: dict[str, str] = {
    "install": "ecoguard.guard.install",
    "uninstall": "ecoguard.guard.install",
    "is_installed": "ecoguard.guard.install",
    "measure": "ecoguard.services",
    "estimate": "ecoguard.knowledge.estimator",
    "Estimate": "ecoguard.knowledge.estimator",
    "evaluate": "ecoguard.rules",
    "explain": "ecoguard.rules",
    "FindingEvent": "ecoguard.guard",
    "Batcher": "ecoguard.batching",
    "batching_stats": "ecoguard.batching",
}

__all__ = [
    "Deployment",
    "EcoguardError",
    "EnergyTrapError",
    "EnergyTrapWarning",
    "Finding",
    "GpuSpec",
    "ModelSpec",
    "Mood",
    "QuantSpec",
    "Settings",
    "SoftwareVersions",
    "UnmeasuredWarning",
    "UsageError",
    "__version__",
    "on_finding",
    "on_record",
    *_LAZY,
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
