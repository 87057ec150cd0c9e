"""Patch hygiene: install/uninstall cycles put back the exact originals, and ecoguard layers
cleanly with another library's wrapt patch on the same methods, in either order.

(The lead's tests/guard/test_guard_install.py already shows 1000 cycles leave the post-import
hooks at two; this file checks the attributes themselves and the layering.)
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import wrapt  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.generation.utils import GenerationMixin  # noqa: E402
from transformers.modeling_utils import PreTrainedModel  # noqa: E402

from ecoguard import events  # noqa: E402
from ecoguard.guard import patches  # noqa: E402
from ecoguard.guard.install import install, is_installed, uninstall  # noqa: E402
from ecoguard.guard.wrappers import RUNTIME  # noqa: E402

ORIGINAL_FROM_PRETRAINED = vars(PreTrainedModel)["from_pretrained"]
ORIGINAL_GENERATE = vars(GenerationMixin)["generate"]
IDS = torch.tensor([[1, 5, 6, 7]])


def originals_in_place() -> bool:
    return (
        vars(PreTrainedModel)["from_pretrained"] is ORIGINAL_FROM_PRETRAINED
        and vars(GenerationMixin)["generate"] is ORIGINAL_GENERATE
    )


@pytest.fixture(autouse=True)
def _originals_before_and_after():
    assert originals_in_place(), "a previous test left a patch behind"
    yield
    # Whatever a test did, put the exact originals back for the tests that follow.
    uninstall()
    PreTrainedModel.from_pretrained = ORIGINAL_FROM_PRETRAINED
    GenerationMixin.generate = ORIGINAL_GENERATE


def test_1000_cycles_restore_the_exact_originals():
    for cycle in range(1000):
        install(measure=False, mode="warn" if cycle % 2 else "fix")
        from_pretrained = vars(PreTrainedModel)["from_pretrained"]
        generate = vars(GenerationMixin)["generate"]
        assert isinstance(from_pretrained, wrapt.FunctionWrapper)
        assert from_pretrained.__wrapped__ is ORIGINAL_FROM_PRETRAINED
        assert generate.__wrapped__ is ORIGINAL_GENERATE
        if cycle % 3 == 0:
            install(measure=False)  # a second install patches nothing more
            assert vars(GenerationMixin)["generate"] is generate
        uninstall()
        if cycle % 5 == 0:
            uninstall()  # a second uninstall is harmless
        assert originals_in_place(), f"cycle {cycle} left a wrapper behind"
        assert not is_installed() and patches.applied() == {}


def test_cycles_with_the_meter_leave_no_thread_behind(tmp_path):
    baseline = {t.name for t in threading.enumerate()}
    for _ in range(10):
        install(measure=True, backend="simulated", ledger_path=tmp_path / "l.sqlite")
        uninstall()
    assert originals_in_place()
    leftover = {t.name for t in threading.enumerate() if t.is_alive()} - baseline
    assert not {n for n in leftover if n.startswith("ecoguard")}, leftover


def test_outputs_after_many_cycles_equal_the_unguarded_outputs(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    plain = model.generate(input_ids=IDS, max_new_tokens=3, do_sample=False)
    for _ in range(200):
        install(measure=False)
        uninstall()
    install(measure=False)
    guarded = model.generate(input_ids=IDS, max_new_tokens=3, do_sample=False)
    uninstall()
    again = model.generate(input_ids=IDS, max_new_tokens=3, do_sample=False)
    assert torch.equal(plain, guarded) and torch.equal(plain, again)


# ------------------------------------------------------------------ another library's patch


class Instrumentor:
    """An OpenTelemetry-style instrumentor: ``wrapt.wrap_function_wrapper`` on the same two
    methods, counting the calls it sees. Its ``uninstrument`` removes its layer when it is on
    top and otherwise turns it into a pass-through (the careful behaviour ecoguard itself has);
    :meth:`naive_uninstrument` is OpenTelemetry's ``utils.unwrap``, which removes whatever
    layer is on top."""

    TARGETS = (
        ("transformers.modeling_utils", "PreTrainedModel", "from_pretrained"),
        ("transformers.generation.utils", "GenerationMixin", "generate"),
    )

    def __init__(self) -> None:
        self.calls: dict[str, int] = {"from_pretrained": 0, "generate": 0}
        self.active = False
        self._wrappers: dict[str, Any] = {}

    def _wrapper(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if self.active:
            self.calls[wrapped.__name__] += 1
        return wrapped(*args, **kwargs)

    def instrument(self) -> None:
        self.active = True
        for module, owner, name in self.TARGETS:
            wrapt.wrap_function_wrapper(module, f"{owner}.{name}", self._wrapper)
            cls = _owner(owner)
            self._wrappers[name] = vars(cls)[name]

    def uninstrument(self) -> None:
        self.active = False
        for _module, owner, name in self.TARGETS:
            cls = _owner(owner)
            if vars(cls).get(name) is self._wrappers.get(name):
                setattr(cls, name, self._wrappers[name].__wrapped__)
        self._wrappers.clear()

    def naive_uninstrument(self) -> None:
        """``opentelemetry.instrumentation.utils.unwrap``: put back ``__wrapped__`` of whatever
        proxy is there (read with ``vars`` here, so a classmethod stays a classmethod)."""
        self.active = False
        for _module, owner, name in self.TARGETS:
            cls = _owner(owner)
            current = vars(cls).get(name)
            # wrapt 2's FunctionWrapper derives from BaseObjectProxy, not wrapt.ObjectProxy.
            if isinstance(current, getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)):
                setattr(cls, name, current.__wrapped__)
        self._wrappers.clear()


def _owner(name: str) -> type:
    return PreTrainedModel if name == "PreTrainedModel" else GenerationMixin


class EcoguardSeen:
    """Whether ecoguard's layers ran: a record per measured generate, a remembered model per
    guarded load."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self._undo = events.records.subscribe(self.records.append)

    def close(self) -> None:
        self._undo()


@pytest.fixture
def seen():
    watcher = EcoguardSeen()
    yield watcher
    watcher.close()


def _guard() -> None:
    install(measure=True, backend="simulated", ledger_path=None, mode="warn")


def _run(path: Any) -> tuple[Any, Any]:
    """Load and generate once; returns (model, output)."""
    model = AutoModelForCausalLM.from_pretrained(path)
    return model, model.generate(input_ids=IDS, max_new_tokens=2, do_sample=False)


@pytest.fixture(scope="module")
def reference(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    return model.generate(input_ids=IDS, max_new_tokens=2, do_sample=False)


def _check_both_ran(other: Instrumentor, seen: EcoguardSeen, path: Any, reference: Any) -> None:
    before = dict(other.calls)
    records = len(seen.records)
    model, out = _run(path)
    assert torch.equal(out, reference)
    assert other.calls["from_pretrained"] == before["from_pretrained"] + 1
    assert other.calls["generate"] == before["generate"] + 1
    assert len(seen.records) == records + 1  # ecoguard measured the call exactly once
    assert RUNTIME.models.get(model) is not None  # ecoguard's load wrapper saw the model


def _check_only_other_ran(other: Instrumentor, seen: EcoguardSeen, path: Any, reference):
    before = dict(other.calls)
    records = len(seen.records)
    _model, out = _run(path)
    assert torch.equal(out, reference)
    assert other.calls["generate"] == before["generate"] + 1
    assert other.calls["from_pretrained"] == before["from_pretrained"] + 1
    assert len(seen.records) == records


def _check_only_ecoguard_ran(other: Instrumentor, seen: EcoguardSeen, path: Any, reference):
    before = dict(other.calls)
    records = len(seen.records)
    _model, out = _run(path)
    assert torch.equal(out, reference)
    assert other.calls == before
    assert len(seen.records) == records + 1


@pytest.mark.parametrize("first_removed", ["ecoguard", "other"])
def test_other_library_patched_first(tiny_llama_dir, seen, reference, first_removed, caplog):
    other = Instrumentor()
    other.instrument()
    _guard()
    _check_both_ran(other, seen, tiny_llama_dir, reference)
    if first_removed == "ecoguard":
        uninstall()  # ecoguard is on top: its exact predecessor (the other wrapper) comes back
        assert vars(GenerationMixin)["generate"] is other._wrappers["generate"]
        _check_only_other_ran(other, seen, tiny_llama_dir, reference)
        other.uninstrument()
    else:
        with caplog.at_level(logging.WARNING, logger="ecoguard"):
            other.uninstrument()  # under ecoguard's layer: it becomes a pass-through
        _check_only_ecoguard_ran(other, seen, tiny_llama_dir, reference)
        uninstall()  # ecoguard was on top: the other library's dormant layer is what remains
        remaining = vars(GenerationMixin)["generate"]
        assert isinstance(remaining, wrapt.FunctionWrapper)
        assert remaining.__wrapped__ is ORIGINAL_GENERATE
        before, records = dict(other.calls), len(seen.records)
        _model, out = _run(tiny_llama_dir)
        assert other.calls == before and len(seen.records) == records
    _model, out = _run(tiny_llama_dir)
    assert torch.equal(out, reference)


@pytest.mark.parametrize("first_removed", ["ecoguard", "other"])
def test_other_library_patched_after(tiny_llama_dir, seen, reference, first_removed, caplog):
    _guard()
    other = Instrumentor()
    other.instrument()
    _check_both_ran(other, seen, tiny_llama_dir, reference)
    if first_removed == "other":
        other.uninstrument()  # on top: ecoguard's wrapper is back in place, working
        assert vars(GenerationMixin)["generate"] is patches.applied()[patches.PATCHES[1]].wrapper
        _check_only_ecoguard_ran(other, seen, tiny_llama_dir, reference)
        uninstall()
        assert originals_in_place()
    else:
        with caplog.at_level(logging.WARNING, logger="ecoguard"):
            uninstall()  # under the other layer: ecoguard leaves it alone, passes through
        assert "wrapped again after ecoguard patched it" in caplog.text
        _check_only_other_ran(other, seen, tiny_llama_dir, reference)
        other.uninstrument()
        # ecoguard's dormant layer is what the other library restores; it passes through,
        # and neither library acts any more.
        before, records = dict(other.calls), len(seen.records)
        _model, out = _run(tiny_llama_dir)
        assert torch.equal(out, reference)
        assert other.calls == before and len(seen.records) == records
        # Installing again measures each call once, not twice (the dormant layer defers).
        _guard()
        _check_only_ecoguard_ran(other, seen, tiny_llama_dir, reference)
        uninstall()
    _model, out = _run(tiny_llama_dir)
    assert torch.equal(out, reference)


def test_opentelemetry_unwrap_under_ecoguard_removes_ecoguards_layer_harmlessly(
    tiny_llama_dir, seen, reference, caplog
):
    """Known limit: OpenTelemetry's ``unwrap`` removes whatever wrapper is on top. With the
    other library patched first and ecoguard on top, that removes ecoguard's layer, not its
    own. Nothing breaks: outputs stay the same, ecoguard stops measuring, and ecoguard's
    uninstall says why it leaves the remaining wrapper alone."""
    other = Instrumentor()
    other.instrument()
    _guard()
    other.naive_uninstrument()  # took ecoguard's layer off
    records = len(seen.records)
    _model, out = _run(tiny_llama_dir)
    assert torch.equal(out, reference)
    assert len(seen.records) == records  # ecoguard no longer sees generate
    with caplog.at_level(logging.WARNING, logger="ecoguard"):
        uninstall()
    assert "wrapped again after ecoguard patched it" in caplog.text
    other.naive_uninstrument()
    assert originals_in_place()
