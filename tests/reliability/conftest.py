"""Fixtures for the reliability suite: a clean process state around every test, the long soak
behind an opt-in, deterministic clocks and the fake NVML driver.

The soak (``@pytest.mark.slow``) runs only with ``-m slow`` (or any marker expression naming it
positively) or with ``ECOGUARD_RUN_SLOW=1``; a plain ``pytest`` skips it, so the default suite
stays fast. (A ``--run-slow`` flag would need ``pytest_addoption`` in the root conftest, which
this suite does not own.)
"""

from __future__ import annotations

import os
import threading

import pytest


def _slow_wanted(config: pytest.Config) -> bool:
    if os.environ.get("ECOGUARD_RUN_SLOW") == "1":
        return True
    expression = (config.getoption("markexpr", default="") or "").replace(" ", "")
    return "slow" in expression and "notslow" not in expression


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _slow_wanted(config):
        return
    skip = pytest.mark.skip(reason="slow soak: run with -m slow or ECOGUARD_RUN_SLOW=1")
    here = os.path.dirname(__file__)
    for item in items:
        if "slow" in item.keywords and str(item.path).startswith(here):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _clean_ecoguard_state():
    """Every test starts and ends with no guard, meter, ledger or metrics server running."""
    from ecoguard.faults import reset_faults

    _stop_everything()
    reset_faults()
    yield
    _stop_everything()
    reset_faults()


def _stop_everything() -> None:
    from ecoguard.energy import stop_meter
    from ecoguard.export.ledger import stop_ledger
    from ecoguard.export.prometheus import stop_metrics_server
    from ecoguard.guard.install import uninstall

    uninstall()
    stop_meter()
    stop_ledger()
    stop_metrics_server()


class StepClock:
    """A monotonic clock that moves only when told to (thread-safe), in seconds."""

    def __init__(self, t: float = 1000.0) -> None:
        self._t = t
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._t += seconds


@pytest.fixture
def step_clock() -> StepClock:
    return StepClock()


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory):
    """The fake ``libnvidia-ml.so.1`` compiled once, loaded into this process (inert until a test
    sets ``FAKE_NVML_ENABLE=1``). Skips only when gcc is missing."""
    from ecoguard.testing.fake_nvml import build_library, gcc_available, load_in_process

    if not gcc_available():
        pytest.skip("gcc is not installed: cannot build the fake NVML library")
    path = build_library(tmp_path_factory.mktemp("reliability-fake-nvml"))
    load_in_process(path)
    return path


@pytest.fixture
def fake_driver(fake_nvml_lib, monkeypatch):
    """``configure(**FakeNvmlConfig fields) -> FakeNvmlConfig``: enable the fake driver."""
    from ecoguard.testing.fake_nvml import FakeNvmlConfig

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def configure(**fields) -> FakeNvmlConfig:
        config = FakeNvmlConfig(**fields)
        for key, value in config.env().items():
            monkeypatch.setenv(key, value)
        return config

    return configure


@pytest.fixture
def driver_clock(fake_nvml_lib):
    """The fake driver's clock (``FakeNvmlClock``): manual once a test configures the driver
    with ``clock="manual"``; give it to the meter as its clock and advance it instead of
    sleeping."""
    from ecoguard.testing.fake_nvml import FakeNvmlClock

    return FakeNvmlClock()  # by soname, as pynvml opens it (the copy loaded first)
