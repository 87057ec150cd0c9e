"""The advisor's seams to the knowledge estimator and the rules, memoised: one answer asks
for the same cell several times (compare baseline, optimize candidates, the optimized column,
the batching advice), so each (deployment, settings, volume) is estimated and judged once.

Importing the knowledge package reads no file: an answer that never estimates never loads the
reference data.
"""

from __future__ import annotations

from typing import Any

from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.findings import Finding
from ecoguard.knowledge.estimator import estimate
from ecoguard.rules import evaluate

_ESTIMATE_CACHE: dict[tuple[Deployment, str, int | None], Any] = {}
_ESTIMATE_CACHE_MAX = 1024


def run_estimate(deployment: Deployment, settings: Settings, requests_per_month: int | None) -> Any:
    """The knowledge estimator, memoised per (deployment, settings, volume): one answer asks for
    the same cell several times (compare baseline, optimize candidates, estimate side by side)."""
    key = (deployment, repr(settings), requests_per_month)
    try:
        return _ESTIMATE_CACHE[key]
    except (KeyError, TypeError):
        pass
    result = estimate(deployment, settings=settings, requests_per_month=requests_per_month)
    if len(_ESTIMATE_CACHE) >= _ESTIMATE_CACHE_MAX:
        _ESTIMATE_CACHE.clear()
    try:
        _ESTIMATE_CACHE[key] = result
    except TypeError:  # an unhashable deployment field: just do not cache
        pass
    return result


_RULES_CACHE: dict[tuple[Deployment, str], tuple[Finding, ...]] = {}


def run_rules(deployment: Deployment, settings: Settings) -> list[Finding]:
    """The rules on the deployment, memoised per (deployment, settings): optimize asks for the
    same cell more than once. A rules failure is a bug and raises (the CLI says it in one line)."""
    key = (deployment, repr(settings))
    try:
        return list(_RULES_CACHE[key])
    except (KeyError, TypeError):
        pass
    found = tuple(evaluate(deployment, settings=settings))
    if len(_RULES_CACHE) >= _ESTIMATE_CACHE_MAX:
        _RULES_CACHE.clear()
    try:
        _RULES_CACHE[key] = found
    except TypeError:
        pass
    return list(found)


_DICT_CACHE: dict[int, tuple[Any, dict[str, Any]]] = {}


def estimate_dict(est: Any) -> dict[str, Any]:
    """The estimator's JSON, or a tier-none dict if it has nothing. Memoised per estimate
    object (the object is held in the cache, so its id is not reused while cached)."""
    if est is None:
        return {"tier": "none"}
    cached = _DICT_CACHE.get(id(est))
    if cached is not None and cached[0] is est:
        return dict(cached[1])
    out = dict(est.to_dict())
    if len(_DICT_CACHE) >= _ESTIMATE_CACHE_MAX:
        _DICT_CACHE.clear()
    _DICT_CACHE[id(est)] = (est, out)
    return dict(out)
