"""Guard test fixtures: every test leaves the guard uninstalled and the event bus clean."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _guard_cleanup():
    from ecoguard import events
    from ecoguard.faults import reset_faults
    from ecoguard.guard.install import uninstall

    uninstall()
    reset_faults()
    yield
    uninstall()
    events.findings.clear()
    reset_faults()


@pytest.fixture
def captured_events():
    """FindingEvents published while the test runs."""
    from ecoguard import events

    seen: list = []
    unsubscribe = events.findings.subscribe(seen.append)
    yield seen
    unsubscribe()


@pytest.fixture
def ecoguard_log(caplog):
    caplog.set_level(logging.WARNING, logger="ecoguard")
    return caplog


class FakeMeter:
    """Records begin/end calls at the meter seam."""

    def __init__(self) -> None:
        self.begins: list[dict] = []
        self.ends: list[dict] = []

    def begin(self, *, devices, info):
        self.begins.append({"devices": devices, "info": info})
        return len(self.begins)

    def end(self, window, *, tokens, requests, error=None):
        self.ends.append({"window": window, "tokens": tokens, "requests": requests, "error": error})

    def gpu_states(self):
        return []


@pytest.fixture
def fake_meter():
    """Install a FakeMeter as the running meter for the guard (after install())."""
    from ecoguard.energy import MeterSlot
    from ecoguard.guard.wrappers import RUNTIME

    meter = FakeMeter()

    def attach(**attributes):
        # Set before the slot holds the meter: a real meter's tracks are fixed when it is built.
        for name, value in attributes.items():
            setattr(meter, name, value)
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class Info:
            model_name: object = None
            precision: object = None
            batch_size: object = None
            prompt_tokens: object = None
            max_new_tokens: object = None
            deployment: object = None
            label: object = None

        RUNTIME.meter_slot = MeterSlot(meter)
        RUNTIME.call_info = Info
        return meter

    return attach
