"""The ladder as an object (issue 34): its design choices, rung order and carrier belong to one
Ladder, never to the process, so the validation tool can score alternatives while estimates keep
the shipped ladder; hold-out ladders are kept per hold-out and rebuilt for new rows."""

from __future__ import annotations

from dataclasses import replace

import pytest
from knowledge_support import deployment

from ecoguard.knowledge import tables
from ecoguard.knowledge.estimator import estimate
from ecoguard.knowledge.evidence import Evidence
from ecoguard.knowledge.ladder import (
    BATCH,
    EXACT,
    INVERSE_RATIO,
    PAIRED_RATIO,
    SHIPPED,
    SIZE,
    SIZE_RATIO,
    Carrier,
    CurrentLadders,
    Ladder,
    Ladders,
    Query,
)

ROWS = tables._shipped_rows()


def _l4_llama() -> Query:
    model = tables.model_registry()["llama-2-7b"]
    return Query(tables.gpu_profiles()["l4"], model.id, model.params_b, "fp16", 1)


def test_choices_belong_to_one_ladder_not_to_the_estimator():
    """A ladder built without the envelope answers differently, and the estimator, asked
    afterwards, still answers with the shipped ladder (a global once leaked between them)."""
    ev = Evidence(ROWS)
    unbounded = Ladder(ev, replace(SHIPPED, envelope=False)).resolve(_l4_llama())
    shipped = Ladder(ev).resolve(_l4_llama())
    assert unbounded is not None and shipped is not None
    assert unbounded.family == shipped.family == "cross-gpu"
    assert unbounded.figure.value > shipped.figure.value  # the envelope's upper bound
    assert shipped.envelope is not None and unbounded.envelope is None
    answer = estimate(deployment("llama-2-7b", "l4", "fp16"))
    assert answer.energy_per_1k_tokens_j == pytest.approx(shipped.figure.value, abs=1e-3)


def test_the_rung_order_is_a_table_the_ladder_follows():
    """Size before the inverse ratio (the validation tool's alternative) answers some held-out
    FP16 configurations by size that the shipped order answers by the inverse ratio, and
    changes nothing else."""
    other = replace(
        SHIPPED,
        rungs=(EXACT, BATCH, PAIRED_RATIO, SIZE, replace(INVERSE_RATIO, by_size=True), SIZE_RATIO),
    )
    profiles = tables.gpu_profiles()
    full = Evidence(ROWS)
    changed = []
    for key in full.configs():
        gpu, model, precision, bs = key
        if precision != "fp16" or gpu not in profiles:
            continue
        held = Evidence(ROWS, hidden_configs=frozenset({key}))
        query = Query(profiles[gpu], model, full.params[model], precision, bs)
        a, b = Ladder(held).resolve(query), Ladder(held, other).resolve(query)
        if (a and a.family) != (b and b.family):
            changed.append((a.family if a else None, b.family if b else None))
    assert changed and set(changed) == {("inverse-ratio", "size")}


def test_a_carrier_is_a_record_the_cross_gpu_rung_reads():
    factor_calls = []

    def doubled(_ladder, target, ref):
        factor_calls.append((target.key, ref.key))
        return 2.0

    carrier = Carrier("doubled", doubled, lambda _ladder: "2 (a test carrier)")
    basis = Ladder(Evidence(ROWS), replace(SHIPPED, carrier=carrier, envelope=False)).resolve(
        _l4_llama()
    )
    assert basis is not None and basis.family == "cross-gpu"
    assert basis.method.endswith("factor = 2 (a test carrier)")
    assert {target for target, _ in factor_calls} == {"l4"}
    assert sorted(ref for _, ref in factor_calls) == sorted(basis.carried_from)


def test_ladders_keep_each_holdout_and_are_rebuilt_for_other_rows():
    ladders = Ladders(ROWS)
    assert ladders.full is ladders.get()
    held = ladders.get(hidden_gpus=("a800",))
    assert held is ladders.get(hidden_gpus=["a800"])
    assert "a800" not in held.evidence.gpus() and "a800" in ladders.full.evidence.gpus()
    rows = [ROWS]
    current = CurrentLadders(lambda: rows[0])
    first = current()
    assert current() is first
    rows[0] = ROWS[:-1]  # another tuple: a local row came or went
    assert current() is not first and current().rows is rows[0]
