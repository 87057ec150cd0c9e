"""The per-answer memo (issue 28): within one answer each cell is estimated and judged once;
two answers share nothing, and nothing stays behind in the module once an answer is done."""

from __future__ import annotations

from collections import Counter

import ecoguard.advisor.estimates as estimates
from ecoguard.advisor.answers import advise
from ecoguard.advisor.estimates import Cells, run_estimate
from ecoguard.config import Settings
from ecoguard.deployment import Deployment


def _counting(monkeypatch) -> Counter:
    calls: Counter = Counter()
    real_estimate, real_evaluate = estimates.estimate, estimates.evaluate

    def estimate(deployment, *, settings, requests_per_month):
        calls["estimate", deployment, requests_per_month] += 1
        return real_estimate(deployment, settings=settings, requests_per_month=requests_per_month)

    def evaluate(deployment, *, settings):
        calls["rules", deployment] += 1
        return real_evaluate(deployment, settings=settings)

    monkeypatch.setattr(estimates, "estimate", estimate)
    monkeypatch.setattr(estimates, "evaluate", evaluate)
    return calls


def test_each_cell_is_computed_once_per_answer_and_not_shared(monkeypatch) -> None:
    calls = _counting(monkeypatch)
    question = "What is the greenest config for Mistral-7B on A800, 1M requests a month?"
    first = advise(question).to_dict()
    assert calls and max(calls.values()) == 1
    once = sum(calls.values())
    assert advise(question).to_dict() == first
    assert sum(calls.values()) == 2 * once  # the second answer computed its own cells
    assert estimates._ACTIVE.get() is None


def test_outside_an_answer_nothing_is_memoised(monkeypatch) -> None:
    calls = _counting(monkeypatch)
    dep = Deployment().with_(batch_size=1)
    run_estimate(dep, Settings(), None)
    run_estimate(dep, Settings(), None)
    assert sum(calls.values()) == 2
    with Cells().active() as cells:
        run_estimate(dep, Settings(), None)
        run_estimate(dep, Settings(), None)
    assert sum(calls.values()) == 3 and len(cells.estimates) == 1
