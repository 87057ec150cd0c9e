"""The guard's per-call path: the remembered last model, the batch size read, the meter slot.

These are the shortcuts that keep a real generate call's guard cost low (benchmarks/RESULTS.md);
each test checks that a shortcut gives the same answer as the long way, and that it is dropped
whenever what it remembers changes."""

from __future__ import annotations

import gc

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from transformers import AutoModelForCausalLM  # noqa: E402

from ecoguard import events  # noqa: E402
from ecoguard.config import Settings  # noqa: E402
from ecoguard.deployment import Deployment, ModelSpec  # noqa: E402
from ecoguard.energy import PROCESS_METER, MeterSlot, start_meter, stop_meter  # noqa: E402
from ecoguard.guard import wrappers  # noqa: E402
from ecoguard.guard.install import install  # noqa: E402
from ecoguard.guard.wrappers import RUNTIME, ModelState, ModelStates  # noqa: E402


class Model:
    """Weak-referenceable, hashable by identity: what the mapping is keyed by."""


def _state(name: str) -> ModelState:
    return ModelState(deployment=Deployment(model=ModelSpec(id=name)))


def _last_is(models: ModelStates, model: object) -> bool:
    return models.last[0]() is model


def test_last_is_remembered_and_forgotten_on_every_change():
    models = ModelStates()
    a, b = Model(), Model()
    state_a, state_b = _state("a"), _state("b")
    models[a] = state_a
    models.remember_last(a, state_a)
    assert _last_is(models, a) and models.last[1] is state_a
    changes = [
        lambda: models.__setitem__(b, state_b),
        lambda: models.__delitem__(b),
        lambda: models.setdefault(b, state_b),
        lambda: models.pop(b),
        lambda: models.update({b: state_b}),
        lambda: models.popitem(),
        lambda: models.clear(),
    ]
    for change in changes:
        models.remember_last(a, state_a)
        change()
        assert models.last[0]() is None and models.last[1] is None, change
    assert len(models) == 0


def test_a_dead_model_matches_nothing():
    models = ModelStates()
    model = Model()
    models[model] = _state("old")
    models.remember_last(model, models[model])
    del model
    gc.collect()
    assert models.last[0]() is None  # the reference died with the model
    assert len(models) == 0  # and its entry left with it


def test_not_weak_referenceable_is_simply_not_remembered():
    models = ModelStates()
    models.remember_last(object(), _state("x"))  # a plain object() takes no weak reference
    assert models.last[0]() is None


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((torch.zeros(3, 5, dtype=torch.long),), {}, 3),
        ((), {"input_ids": torch.zeros(1, 5, dtype=torch.long)}, 1),
        ((), {"inputs": torch.zeros(4, 2)}, 4),
        ((), {"inputs_embeds": torch.zeros(2, 3, 8)}, 2),
        ((np.zeros((6, 2)),), {}, 6),
        ((torch.tensor(7),), {}, None),  # 0-d: no batch dimension
        (([[1, 2], [3, 4]],), {}, None),  # a list has neither
        ((), {}, None),
    ],
)
def test_batch_size_read_inline_agrees_with_the_long_way(args, kwargs, expected, fake_meter):
    assert wrappers._batch_size(args, kwargs) == expected
    # The wrapper reads the common case inline; every case must leave the streak as the long
    # way does (a row count of 1 extends it, anything else resets it).
    install(mode="warn", measure=False)
    fake_meter(tracks=())  # nothing to measure: the plain call path
    model = Model()
    state = wrappers._remember(model, Deployment(model=ModelSpec(id="m")))
    state.consecutive_bs1 = 5
    wrappers.generate_wrapper(lambda *a, **k: None, model, args, kwargs)
    assert state.consecutive_bs1 == (6 if expected == 1 else 0)


def test_meter_slot_holds_a_measurable_meter_only_when_it_has_gpus():
    class WithTracks:
        tracks = (object(),)

    class NoTracks:
        tracks = ()

    class Unknown:  # a meter that does not say: measured (the window decides)
        pass

    slot = MeterSlot()
    assert (slot.meter, slot.measurable) == (None, None)
    for meter, measurable in ((WithTracks(), True), (NoTracks(), False), (Unknown(), True)):
        slot.hold(meter)
        assert slot.meter is meter
        assert (slot.measurable is meter) is measurable
    slot.hold(None)
    assert (slot.meter, slot.measurable) == (None, None)


def test_process_meter_slot_follows_start_and_stop():
    stop_meter()
    null = start_meter(Settings(backend="null", ledger_path=None))
    try:
        assert PROCESS_METER.meter is null and PROCESS_METER.measurable is None
    finally:
        stop_meter()
    simulated = start_meter(Settings(backend="simulated", ledger_path=None))
    try:
        assert PROCESS_METER.meter is simulated and PROCESS_METER.measurable is simulated
    finally:
        stop_meter()
    assert (PROCESS_METER.meter, PROCESS_METER.measurable) == (None, None)


def _sample(model):
    ids = torch.tensor([[1, 5, 6, 7], [0, 1, 9, 10]])
    return model.generate(input_ids=ids, max_new_tokens=2, min_new_tokens=2, do_sample=False)


def test_a_meter_started_after_install_measures_and_one_stopped_does_not(tiny_llama_dir):
    install(mode="warn", measure=False, ledger_path=None)
    assert RUNTIME.meter_slot is PROCESS_METER
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    records: list = []
    unsubscribe = events.records.subscribe(records.append)
    try:
        _sample(model)
        assert records == []  # no meter running
        start_meter(Settings(backend="simulated", ledger_path=None))
        _sample(model)
        assert len(records) == 1 and records[0].tokens == 4  # 2 rows x 2 new tokens
        stop_meter()
        _sample(model)
        assert len(records) == 1
    finally:
        unsubscribe()
        stop_meter()


def test_two_models_in_turn_each_keep_their_own_streak(tiny_llama_dir, tiny_qwen2_dir):
    install(mode="warn", measure=False)
    first = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    second = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    one = torch.tensor([[1, 5, 6]])
    for _ in range(3):
        first.generate(one, max_new_tokens=1)
        second.generate(torch.tensor([[1, 5, 6], [2, 3, 4]]), max_new_tokens=1)
    assert RUNTIME.models[first].consecutive_bs1 == 3
    assert RUNTIME.models[second].consecutive_bs1 == 0
    assert _last_is(RUNTIME.models, second)
    RUNTIME.models.clear()  # what uninstall does: the next call analyses the model again
    first.generate(one, max_new_tokens=1)
    assert RUNTIME.models[first].consecutive_bs1 == 1
