"""Knowledge: the reference dataset, GPU/model/grid tables, crossover sizes and the estimator.

Importing this package reads no file: tables load on first use and stay cached. The estimator
is in :mod:`ecoguard.knowledge.estimator` (also reachable here as ``estimate``/``Estimate``).
"""

from __future__ import annotations

from ecoguard.knowledge.counts import DataCounts, PublishedCounts, data_counts
from ecoguard.knowledge.crossover import crossover
from ecoguard.knowledge.estimator import Estimate, Monthly, estimate
from ecoguard.knowledge.memory import MemoryNeed, memory_need
from ecoguard.knowledge.records import (
    Crossover,
    Equivalent,
    GpuProfile,
    GridInfo,
    ModelInfo,
    ReferenceRow,
)
from ecoguard.knowledge.tables import (
    add_local_rows,
    clear_local_rows,
    equivalents,
    find_rows,
    gpu_profiles,
    model_registry,
    parse_params_b,
    pue_defaults,
    reference_rows,
    region,
    regions,
    resolve_gpu,
    resolve_model,
)

__all__ = [
    "Crossover",
    "DataCounts",
    "Equivalent",
    "Estimate",
    "GpuProfile",
    "GridInfo",
    "MemoryNeed",
    "ModelInfo",
    "Monthly",
    "PublishedCounts",
    "ReferenceRow",
    "add_local_rows",
    "clear_local_rows",
    "crossover",
    "data_counts",
    "equivalents",
    "estimate",
    "find_rows",
    "gpu_profiles",
    "memory_need",
    "model_registry",
    "parse_params_b",
    "pue_defaults",
    "reference_rows",
    "region",
    "regions",
    "resolve_gpu",
    "resolve_model",
]
