"""Fixtures for the meter tests: the fake NVML library loaded into this process.

The library is compiled once per session with gcc (tests skip only when gcc is missing) and loaded
by full path, so pynvml's ``CDLL("libnvidia-ml.so.1")`` resolves to it and the real ctypes path
runs. It stays inert (init fails like a machine without a driver) unless a test enables it through
``FAKE_NVML_*`` variables, which monkeypatch removes after each test.
"""

from __future__ import annotations

import pytest

from ecoguard.testing.fake_nvml import (
    FakeNvmlClock,
    FakeNvmlConfig,
    build_library,
    gcc_available,
    load_in_process,
)


@pytest.fixture(scope="session")
def fake_nvml_library(tmp_path_factory):
    if not gcc_available():
        pytest.skip("gcc is not installed: cannot build the fake NVML library")
    path = build_library(tmp_path_factory.mktemp("fake-nvml"))
    load_in_process(path)
    return path


@pytest.fixture
def fake_nvml(fake_nvml_library, monkeypatch):
    """``configure(**fields) -> FakeNvmlConfig``: enable the fake driver with that behaviour."""

    def configure(**fields) -> FakeNvmlConfig:
        config = FakeNvmlConfig(**fields)
        for key, value in config.env().items():
            monkeypatch.setenv(key, value)
        return config

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return configure


@pytest.fixture
def nvml_meter(fake_nvml):
    """``make(config_fields=..., **meter_kwargs) -> (meter, config)``; meters stop at teardown."""
    from ecoguard.config import Settings
    from ecoguard.energy import Meter
    from ecoguard.energy.backends import NvmlBackend

    meters = []

    def make(*, hz: float = 10.0, visible: str | None = None, **fields):
        config = fake_nvml(**fields)
        backend = NvmlBackend.probe(visible_devices=visible)
        meter = Meter(Settings(ledger_path=None, sample_hz=hz), backend=backend).start()
        meters.append(meter)
        assert meter.wait_ready(5.0)
        return meter, config

    yield make
    for meter in meters:
        meter.stop()


@pytest.fixture
def nvml_clock(fake_nvml_library):
    """The fake driver's clock: manual once a test enables the driver with ``clock="manual"``.

    Opened by soname, as pynvml opens the library: another test directory may have loaded its
    own copy of the fake first, and then that copy is the one whose clock pynvml's reads see."""
    return FakeNvmlClock()


@pytest.fixture
def manual_nvml_meter(fake_nvml, nvml_clock):
    """``make(hz=..., calibrate=True, **config_fields) -> (meter, config, clock)``: a meter on the
    fake driver's manual clock, not started. Its counters are calibrated by hand on that clock
    (as the sampler's first pass does, without waiting in real time); a test moves time with
    ``clock.advance(..., step_s=meter.sampler.interval_s, on_step=meter.sampler.sample_once)``,
    which reads the GPUs as the sampler thread would. Meters stop at teardown."""
    from ecoguard.config import Settings
    from ecoguard.energy import Meter
    from ecoguard.energy.backends import NvmlBackend

    meters = []

    def make(*, hz: float = 10.0, calibrate: bool = True, **fields):
        config = fake_nvml(clock="manual", **fields)
        backend = NvmlBackend.probe()
        meter = Meter(
            Settings(ledger_path=None, sample_hz=hz),
            backend=backend,
            clock=nvml_clock,
            calibrate=False,
            sleep=nvml_clock.sleep,
        )
        meters.append(meter)
        if calibrate:
            calibrate_on(meter, nvml_clock)
        return meter, config, nvml_clock

    yield make
    for meter in meters:
        meter.stop()


def calibrate_on(meter, clock: FakeNvmlClock) -> None:
    """The sampler's own first pass (every GPU read, then each counter calibrated with every GPU
    read again after it), its waits taken on ``clock`` (the meter was built with
    ``sleep=clock.sleep``) instead of real time."""
    start = clock()
    meter.sampler.calibrate_all()
    assert clock() > start, "the calibration's waits did not move the manual clock"
    for track in meter.tracks:
        if track.has_counter and not track.stale:
            assert track.phase.calibrated, f"GPU {track.index} did not calibrate"


@pytest.fixture(autouse=True)
def _no_leaked_meter():
    yield
    from ecoguard.energy import stop_meter

    stop_meter()
