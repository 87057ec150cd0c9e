"""``ecoguard bench``: the measurement protocol of the reference study, run on the user's machine.

Warm-up, n measured runs per configuration, fixed prompt and generation lengths (exactly N new
tokens, greedy), one meter window per run, idle power recorded, a same-session FP16 baseline.
Each finished configuration becomes a :class:`~ecoguard.knowledge.ReferenceRow` with tier
``local`` appended to the local dataset (:func:`ecoguard.knowledge.tables.local_data_path`), which
the estimator then prefers for the same GPU and model.

Importing this package imports neither torch nor transformers; :func:`run_bench` does, when called.
"""

from __future__ import annotations

from ecoguard.bench.plan import BENCH_PRECISIONS, BenchPlan, parse_precisions, parse_sizes
from ecoguard.bench.runner import run_bench
from ecoguard.bench.stats import Summary, summarize

__all__ = [
    "BENCH_PRECISIONS",
    "BenchPlan",
    "Summary",
    "parse_precisions",
    "parse_sizes",
    "run_bench",
    "summarize",
]
