"""The fake driver itself, through the real pynvml ctypes bindings."""

from __future__ import annotations

import math
import time

import pytest

from ecoguard.testing.fake_nvml import FakeNvmlConfig


def test_fake_nvml_answers_like_a_driver(fake_nvml, nvml_clock):
    pynvml = pytest.importorskip("pynvml")
    config = fake_nvml(gpus=2, base_w=(300.0,), amp_w=(0.0,), clock="manual")
    pynvml.nvmlInit()
    try:
        assert pynvml.nvmlDeviceGetCount() == 2
        handle = pynvml.nvmlDeviceGetHandleByIndex(1)
        name = pynvml.nvmlDeviceGetName(handle)
        assert (name.decode() if isinstance(name, bytes) else name) == config.name
        assert pynvml.nvmlDeviceGetArchitecture(handle) == pynvml.NVML_DEVICE_ARCH_AMPERE
        assert pynvml.nvmlDeviceGetCudaComputeCapability(handle) == (8, 0)
        assert pynvml.nvmlDeviceGetMemoryInfo(handle).total == 81920 * 2**20
        field = pynvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_POWER_INSTANT])[0]
        assert field.nvmlReturn == 0 and field.value.uiVal == 300_000
        first = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        nvml_clock.advance(0.25)
        second = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        # Quantised to 100 ms updates at 300 W: the delta is a whole number of 30 J steps.
        assert (second - first) % 30_000 in (0, 1, 29_999)
        assert 30_000 <= second - first <= 90_001
    finally:
        pynvml.nvmlShutdown()


def test_counter_absent_and_disabled(fake_nvml, monkeypatch):
    pynvml = pytest.importorskip("pynvml")
    fake_nvml(counter=False)
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError) as info:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        assert info.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    finally:
        pynvml.nvmlShutdown()
    monkeypatch.delenv("FAKE_NVML_ENABLE")
    with pytest.raises(pynvml.NVMLError):
        pynvml.nvmlInit()


def test_analytic_energy_matches_power_integral():
    from ecoguard.testing.fake_nvml import FakeNvmlConfig

    config = FakeNvmlConfig()
    t0, t1, steps = 100.0, 103.7, 37_000
    dt = (t1 - t0) / steps
    riemann = sum(config.power_w(1, t0 + (i + 0.5) * dt) for i in range(steps)) * dt
    assert config.energy_j(1, t0, t1) == pytest.approx(riemann, rel=1e-9)


def _counter_mj(config, gpu, t):
    """What the quantised counter reads at driver time ``t`` (mJ), from the Python mirror."""
    u = config.update_offset_s + math.floor((t - config.update_offset_s) / config.update_s) * (
        config.update_s
    )
    return math.floor(config.energy_j(gpu, 0.0, u) * 1000.0)


def test_manual_clock_moves_only_when_told(fake_nvml, nvml_clock):
    """On the manual clock the driver's time stands still between readings, moves by ``tick_s``
    per reading of energy or power, and by exactly what the test advances; the counter, the
    instant power and the lost-GPU schedule all follow it, and a re-init never sets it back."""
    pynvml = pytest.importorskip("pynvml")
    config = fake_nvml(gpus=1, clock="manual", tick_s=0.001, lost_after_s=3.0)
    pynvml.nvmlInit()
    try:
        assert nvml_clock.manual
        t0 = nvml_clock()
        assert nvml_clock.init_s == t0
        time.sleep(0.01)  # real time passes; the driver's does not
        assert nvml_clock() == t0
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        first = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        assert nvml_clock() == pytest.approx(t0 + 0.001, abs=1e-9)  # one tick per reading
        assert first == _counter_mj(config, 0, nvml_clock())
        nvml_clock.advance(1.25)
        assert nvml_clock() == pytest.approx(t0 + 1.251, abs=1e-9)
        second = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        assert second == _counter_mj(config, 0, nvml_clock())
        assert second - first == pytest.approx(
            1000.0 * config.energy_j(0, t0 + 0.001, t0 + 1.252), abs=0.1 * 400_000
        )
        field = pynvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_POWER_INSTANT])[0]
        assert field.value.uiVal == int(config.power_w(0, nvml_clock()) * 1000.0)
        steps = []
        nvml_clock.advance(0.35, step_s=0.1, on_step=lambda: steps.append(nvml_clock()))
        assert [round(t - t0, 6) for t in steps] == [1.353, 1.453, 1.553, 1.603]
        nvml_clock.advance_to(nvml_clock.init_s + 3.0)  # the GPU is lost 3 s after init
        with pytest.raises(pynvml.NVMLError) as info:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        assert info.value.value == pynvml.NVML_ERROR_GPU_IS_LOST
        before = nvml_clock()
        pynvml.nvmlInit()  # a re-init restarts the lost schedule, not the clock
        assert nvml_clock() == before and nvml_clock.init_s == before
        assert pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) >= second
        with pytest.raises(ValueError, match="already past"):
            nvml_clock.advance_to(before - 1.0)
        with pytest.raises(ValueError, match="only moves forward"):
            nvml_clock.advance(-0.1)
    finally:
        pynvml.nvmlShutdown()


def test_real_time_stays_the_default(fake_nvml, nvml_clock):
    pynvml = pytest.importorskip("pynvml")
    fake_nvml(gpus=1)
    pynvml.nvmlInit()
    try:
        assert not nvml_clock.manual
        assert abs(nvml_clock() - time.monotonic()) < 0.5  # CLOCK_MONOTONIC, like Python's
        with pytest.raises(RuntimeError, match="real time"):
            nvml_clock.advance(1.0)
    finally:
        pynvml.nvmlShutdown()
    with pytest.raises(ValueError, match="clock must be one of"):
        FakeNvmlConfig(clock="fast")
    with pytest.raises(ValueError, match="tick_s"):
        FakeNvmlConfig(tick_s=-1.0)


def test_direct_instant_power_read_answers_as_pynvml_does(fake_nvml, nvml_clock):
    """The backend reads field 186 through nvmlDeviceGetFieldValues directly (issue 31): the
    same watts as pynvml's wrapper, and a lost GPU is still DeviceLostError."""
    pynvml = pytest.importorskip("pynvml")
    from ecoguard.energy.backends import NvmlBackend
    from ecoguard.errors import DeviceLostError

    fake_nvml(
        gpus=2, base_w=(300.0, 120.0), amp_w=(25.0,), clock="manual", tick_s=0.0, lost_after_s=5.0
    )
    backend = NvmlBackend.probe()
    try:
        assert backend._read_instant_power is not None  # the real module: the direct path
        for step in range(5):
            nvml_clock.advance(0.3 + 0.01 * step)
            for index in (0, 1):
                handle = backend._handles[index]
                field = pynvml.nvmlDeviceGetFieldValues(handle, [186])[0]
                assert backend.power_w(index) == field.value.uiVal / 1000.0
        nvml_clock.advance(10.0)
        with pytest.raises(DeviceLostError):
            backend.power_w(0)
    finally:
        backend.close()


def test_a_stand_in_pynvml_is_read_through_its_own_functions():
    from ecoguard.energy.nvml import NvmlBackend

    class Field:
        nvmlReturn = 0
        valueType = 1
        value = type("Value", (), {"uiVal": 123_000})()

    class StandIn:
        def nvmlDeviceGetFieldValues(self, handle, fields):
            assert fields == [186]
            return [Field()]

    backend = NvmlBackend(StandIn(), ["handle"], [0])
    assert backend._read_instant_power is None
    assert backend.power_w(0) == 123.0
