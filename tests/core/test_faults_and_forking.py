"""The shared fail-open block and the once-per-owner fork hooks."""

from __future__ import annotations

import os
import sys

import pytest

from ecoguard import forking
from ecoguard.errors import EnergyTrapError
from ecoguard.faults import contained, fault_counts, reset_faults


def test_contained_counts_swallows_and_lets_the_caller_go_on():
    reset_faults()
    reached = []
    with contained("test.stage"):
        raise RuntimeError("boom")
    reached.append(True)
    assert reached == [True]
    assert fault_counts()["test.stage"] == 1


def test_contained_lets_passthrough_types_propagate_uncounted():
    reset_faults()
    with pytest.raises(EnergyTrapError), contained("test.strict", passthrough=(EnergyTrapError,)):
        raise EnergyTrapError("refused on purpose")
    assert "test.strict" not in fault_counts()


def test_contained_never_swallows_base_exceptions():
    with pytest.raises(KeyboardInterrupt), contained("test.interrupt"):
        raise KeyboardInterrupt


@pytest.mark.skipif(not hasattr(os, "register_at_fork"), reason="no fork hooks on this platform")
def test_fork_hooks_register_once_per_owner(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "register_at_fork", lambda **hooks: calls.append(sorted(hooks)))
    monkeypatch.setattr(forking, "_registered", {})
    child = lambda: None  # noqa: E731
    assert forking.register_fork_hooks("test.owner", after_in_child=child) is True
    assert forking.register_fork_hooks("test.owner", after_in_child=child) is False
    assert forking.register_fork_hooks("test.other", before=child, after_in_parent=child) is True
    assert calls == [["after_in_child"], ["after_in_parent", "before"]]
    assert set(forking._registered) == {"test.owner", "test.other"}


@pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "fork"), reason="needs os.fork")
def test_registered_child_hook_runs_in_a_real_forked_child(tmp_path):
    marker = tmp_path / "child-ran"
    owner = f"test.real.{os.getpid()}.{id(marker)}"
    assert forking.register_fork_hooks(owner, after_in_child=lambda: marker.write_text("yes"))
    pid = os.fork()
    if pid == 0:  # the child: the hook already ran before fork() returned here
        os._exit(0 if marker.exists() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert marker.read_text() == "yes"
