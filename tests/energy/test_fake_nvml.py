"""The fake driver itself, through the real pynvml ctypes bindings."""

from __future__ import annotations

import time

import pytest


def test_fake_nvml_answers_like_a_driver(fake_nvml):
    pynvml = pytest.importorskip("pynvml")
    config = fake_nvml(gpus=2, base_w=(300.0,), amp_w=(0.0,))
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
        time.sleep(0.25)
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
