"""Faults in the GPU layer: the meter never crashes, labels what it reports, counts every fault,
and recovers when the GPU comes back.

Three kinds of fake, each at a real seam:

* the fake NVML C library (``ecoguard.testing.fake_nvml``) driven through the real ``pynvml``
  ctypes path, in this process (init failing, counter not supported, GPU lost mid-call and back,
  counter reset) or in a subprocess found through ``LD_LIBRARY_PATH`` (no library at all; a
  library with functions missing, compiled from the same source with those functions removed);
* ``pynvml`` itself missing or failing (monkeypatched module);
* scripted backends with a step clock (counter wrap at 2**64 mJ, frozen counters, absurd power
  and absurd counter jumps, NotSupported everywhere), fuzzed with hypothesis.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from ecoguard.config import Settings
from ecoguard.energy import CallInfo, Meter
from ecoguard.energy.backends import DeviceInfo, NullBackend, NvmlBackend, choose_backend
from ecoguard.errors import BackendError, DeviceLostError, NotSupportedError
from ecoguard.faults import fault_counts, reset_faults

REPO = Path(__file__).resolve().parents[2]


def meter_faults() -> int:
    return sum(v for k, v in fault_counts().items() if k.startswith("meter."))


def _nvml_meter(clock) -> Meter:
    """A meter on the fake driver, not started: tests drive the sampler by hand and move the
    driver's manual clock (``clock``, which the meter shares) instead of sleeping."""
    return Meter(
        Settings(ledger_path=None),
        backend=NvmlBackend.probe(visible_devices=None),
        clock=clock,
        calibrate=False,
    )


# ------------------------------------------------------------------ no driver, broken driver


def test_pynvml_not_installed_falls_back_to_null(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    assert isinstance(choose_backend(Settings(backend="auto")), NullBackend)
    with pytest.raises(BackendError, match="nvidia-ml-py is not installed"):
        choose_backend(Settings(backend="nvml"))


def test_library_missing_or_init_failing_never_reaches_the_user(monkeypatch, fake_nvml_lib):
    """``nvmlInit`` failing (no library, driver not loaded): ``auto`` meters nothing, an explicit
    ``nvml`` is refused by the backend, and ``install`` turns either into a counted fault."""
    import pynvml

    from ecoguard.energy import get_meter
    from ecoguard.guard.install import install

    monkeypatch.delenv("FAKE_NVML_ENABLE", raising=False)  # the fake answers DRIVER_NOT_LOADED
    assert isinstance(choose_backend(Settings(backend="auto")), NullBackend)
    with pytest.raises(BackendError, match="nvmlInit"):
        choose_backend(Settings(backend="nvml"))

    def library_not_found() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", library_not_found)
    assert isinstance(choose_backend(Settings(backend="auto")), NullBackend)
    reset_faults()
    install(measure=True, backend="nvml", ledger_path=None)  # does not raise
    assert get_meter() is None and fault_counts().get("guard.start_meter") == 1


_NO_LIBRARY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from transformers import AutoModelForCausalLM
    import ecoguard
    from ecoguard.energy import get_meter
    from ecoguard.faults import fault_counts, reset_faults
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
    ids = torch.tensor([[1, 5, 6, 7]])
    plain = model.generate(input_ids=ids, max_new_tokens=3, do_sample=False)
    results = {}
    for backend in ("auto", "nvml"):
        reset_faults()
        ecoguard.install(measure=True, backend=backend, ledger_path=None)
        guarded = model.generate(input_ids=ids, max_new_tokens=3, do_sample=False)
        meter = get_meter()
        results[backend] = {
            "same": bool(torch.equal(plain, guarded)),
            "backend": None if meter is None else meter.backend.name,
            "faults": fault_counts(),
        }
        ecoguard.uninstall()
    print(json.dumps(results))
    """
)


def test_no_nvml_library_in_a_fresh_process(tiny_llama_dir, tmp_path):
    """A process where ``libnvidia-ml.so.1`` cannot be found at all (this machine has none, and
    the fake is not on the loader path): the guarded call is the unguarded one, with ``auto``
    (null backend) and with an explicit ``nvml`` (no meter, one counted fault)."""
    if _system_has_nvml():
        pytest.skip("this machine has a real NVIDIA driver: the library is not missing")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML")}
    env["LD_LIBRARY_PATH"] = str(tmp_path)  # an empty directory
    out = subprocess.run(
        [sys.executable, "-c", _NO_LIBRARY_SCRIPT, str(tiny_llama_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["auto"]["same"] is True and result["auto"]["backend"] == "null"
    explicit = result["nvml"]
    assert explicit["same"] is True and explicit["backend"] is None
    assert explicit["faults"].get("guard.start_meter") == 1


def _system_has_nvml() -> bool:
    import ctypes.util

    return ctypes.util.find_library("nvidia-ml") is not None


# ------------------------------------------------------------------ functions missing

_STRIPPED_SCRIPT = textwrap.dedent(
    """
    import json
    from ecoguard.config import Settings
    from ecoguard.energy import CallInfo, Meter
    from ecoguard.energy.backends import NvmlBackend
    from ecoguard.faults import fault_counts
    from ecoguard.testing.fake_nvml import FakeNvmlClock
    clock = FakeNvmlClock()  # the stripped library found on LD_LIBRARY_PATH, manual clock
    backend = NvmlBackend.probe()
    meter = Meter(Settings(ledger_path=None), backend=backend, clock=clock, calibrate=False)
    for _ in range(3):
        meter.sampler.sample_once()
        clock.advance(0.02)
    window = meter.begin(devices=None, info=CallInfo(model_name="m"))
    clock.advance(0.5)
    record = meter.end(window, tokens=10, requests=1)
    state = meter.gpu_states()[0]
    print(json.dumps({
        "energy_j": record.energy_j, "duration_s": record.duration_s, "tier": record.tier,
        "method": record.method, "complete": record.complete, "faults": fault_counts(),
        "stale": state.stale,
    }))
    """
)


def _strip_functions(source: str, names: tuple[str, ...]) -> str:
    for name in names:
        pattern = re.compile(rf"^nvmlReturn_t {name}\(.*?^\}}\n", re.MULTILINE | re.DOTALL)
        source, count = pattern.subn("", source, count=1)
        assert count == 1, f"{name} not found in fake_nvml.c"
    return source


def test_driver_without_energy_counter_and_instant_power_functions(tmp_path):
    """An old driver: ``nvmlDeviceGetTotalEnergyConsumption`` and ``nvmlDeviceGetFieldValues``
    are not in the library at all (pynvml raises FUNCTION_NOT_FOUND). The meter falls back to
    integrating ``nvmlDeviceGetPowerUsage`` and says so in the record's method."""
    from ecoguard.testing import fake_nvml

    if not fake_nvml.gcc_available():
        pytest.skip("gcc is not installed: cannot build the fake NVML library")
    source = _strip_functions(
        fake_nvml.SOURCE.read_text(),
        ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetFieldValues"),
    )
    c_file = tmp_path / "stripped.c"
    c_file.write_text(source)
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    built = subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O2",
            "-Wl,-soname,libnvidia-ml.so.1",
            "-o",
            str(lib_dir / "libnvidia-ml.so.1"),
            str(c_file),
            "-lm",
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    nm = subprocess.run(
        ["nm", "-D", str(lib_dir / "libnvidia-ml.so.1")], capture_output=True, text=True
    )
    if nm.returncode == 0:
        assert "nvmlDeviceGetTotalEnergyConsumption" not in nm.stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML")}
    env.update(
        fake_nvml.FakeNvmlConfig(gpus=1, base_w=(200.0,), amp_w=(0.0,), clock="manual").env()
    )
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    out = subprocess.run(
        [sys.executable, "-c", _STRIPPED_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # Averaged power only (no counter, no instant field): a method of its own, so the records
    # say their short-call figures are coarse (docs/meter.md, "Methods").
    assert result["tier"] == "live" and result["method"] == "averaged_power_integration"
    assert result["complete"] is True and result["stale"] is False
    # Constant 200 W; GetPowerUsage is a 1 s mean, so a 0.5 s window reads close to 200 W.
    assert result["energy_j"] == pytest.approx(200.0 * result["duration_s"], rel=0.05)


# ------------------------------------------------------------------ the fake driver in-process


def test_counter_not_supported_falls_back_to_power_integration(fake_driver, driver_clock):
    config = fake_driver(gpus=1, counter=False, base_w=(250.0,), amp_w=(0.0,), clock="manual")
    meter = _nvml_meter(driver_clock)
    meter.sampler.sample_once()
    window = meter.begin(devices=None, info=CallInfo(model_name="m"))
    t0 = driver_clock()
    driver_clock.advance(0.3)
    record = meter.end(window, tokens=5, requests=1)
    t1 = driver_clock()
    assert record.tier == "live" and record.method == "power_integration" and record.complete
    assert record.energy_j == pytest.approx(config.energy_j(0, t0, t1), rel=0.05)
    meter.stop()


def test_gpu_lost_mid_call_then_back(fake_driver, driver_clock, monkeypatch):
    """The GPU answers GPU_IS_LOST in the middle of a call: the call ends normally with an
    incomplete record, the GPU is marked stale, the fault counted; after a driver reset it is
    read again (after the backoff) and measures correctly."""
    import pynvml

    config = fake_driver(gpus=1, lost_after_s=0.25, base_w=(300.0,), amp_w=(0.0,), clock="manual")
    meter = _nvml_meter(driver_clock)
    meter.sampler.sample_once()
    window = meter.begin(devices=None, info=CallInfo(model_name="m"))
    driver_clock.advance(0.35)
    record = meter.end(window, tokens=5, requests=1)  # must not raise
    assert record is not None and record.complete is False and record.tier == "live"
    assert math.isfinite(record.energy_j) and record.energy_j >= 0
    state = meter.gpu_states()[0]
    assert state.stale and state.faults >= 1
    assert fault_counts().get("meter.device_lost", 0) >= 1
    assert meter.sampler.sample_once() == 0  # still lost (or backing off): no crash
    # The GPU comes back (driver reset): same handles, working again.
    monkeypatch.setenv("FAKE_NVML_LOST_AFTER_S", "-1")
    pynvml.nvmlInit()
    driver_clock.advance(0.55)  # the first backoff is 0.5 s
    assert meter.sampler.sample_once() == 1
    assert not meter.gpu_states()[0].stale
    window = meter.begin(devices=None, info=CallInfo(model_name="m"))
    t0 = driver_clock()
    driver_clock.advance(0.3)
    t1 = driver_clock()
    record = meter.end(window, tokens=5, requests=1)
    assert record.complete is True
    # Uncalibrated quantised counter: within one 100 ms update of power at each edge.
    assert abs(record.energy_j - config.energy_j(0, t0, t1)) <= 2 * 0.1 * 300.0 + 1.0
    meter.stop()


def test_counter_reset_mid_call_is_bridged(fake_driver, driver_clock):
    config = fake_driver(gpus=1, reset_after_s=0.2, base_w=(300.0,), amp_w=(0.0,), clock="manual")
    meter = _nvml_meter(driver_clock)
    meter.sampler.sample_once()
    window = meter.begin(devices=None, info=CallInfo(model_name="m"))
    t0 = driver_clock()
    driver_clock.advance(0.48, step_s=0.06, on_step=meter.sampler.sample_once)
    t1 = driver_clock()
    record = meter.end(window, tokens=5, requests=1)
    assert fault_counts().get("meter.counter_reset", 0) == 1
    assert record.complete and record.energy_j > 0
    assert abs(record.energy_j - config.energy_j(0, t0, t1)) <= 2 * 0.1 * 300.0 + 1.0
    meter.stop()


# ------------------------------------------------------------------ scripted backends


class ScriptedBackend:
    """One GPU whose counter (J) and power (W) the test sets before each read."""

    name, tier = "scripted", "live"

    def __init__(self, *, quantised: bool = False, power_limit_w: float = 400.0) -> None:
        self.counter_quantised = quantised
        self.counter: float | None = 0.0
        self.power: float = 100.0
        self.fail: BaseException | None = None
        self.power_fail: BaseException | None = None
        self._limit = power_limit_w

    def device_count(self) -> int:
        return 1

    def device_info(self, index: int) -> DeviceInfo:
        return DeviceInfo(
            index=0, name="Scripted GPU", uuid="GPU-scripted", power_limit_w=self._limit
        )

    def energy_j(self, index: int) -> float | None:
        if self.fail is not None:
            raise self.fail
        return self.counter

    def power_w(self, index: int) -> float:
        if self.power_fail is not None:
            raise self.power_fail
        return self.power

    def close(self) -> None:
        pass


def _scripted_meter(backend: ScriptedBackend, clock) -> Meter:
    return Meter(Settings(ledger_path=None), backend=backend, clock=clock, calibrate=False)


def test_counter_wrap_at_2_to_the_64_millijoules(step_clock):
    """NVML's counter is an unsigned 64-bit mJ count: after the wrap the raw value is small."""
    top_j = (2**64 - 1) / 1000.0
    backend = ScriptedBackend()
    backend.counter, backend.power = top_j - 50.0, 200.0
    meter = _scripted_meter(backend, step_clock)
    meter.sampler.sample_once()
    window = meter.begin(devices=None, info=CallInfo(model_name="m"))
    step_clock.advance(0.5)
    backend.counter = 50.0  # wrapped: 100 J after the last read (200 W x 0.5 s)
    meter.sampler.sample_once()
    step_clock.advance(0.5)
    backend.counter = 150.0
    record = meter.end(window, tokens=1, requests=1)
    assert fault_counts().get("meter.counter_reset") == 1
    assert record.energy_j == pytest.approx(200.0, rel=1e-6)  # bridged by power, then counter


def test_not_supported_everywhere_degrades_without_raising(step_clock):
    backend = ScriptedBackend()
    backend.fail = NotSupportedError("counter not supported")
    backend.power_fail = NotSupportedError("power not supported")
    meter = _scripted_meter(backend, step_clock)
    assert meter.sampler.sample_once() == 0
    window = meter.begin(devices=None, info=CallInfo(model_name="m"))
    step_clock.advance(1.0)
    record = meter.end(window, tokens=1, requests=1)
    assert record is not None and record.complete is False and record.energy_j == 0.0
    assert record.tier == "live"
    assert fault_counts().get("meter.not_supported", 0) >= 1
    assert meter.gpu_states()[0].stale


def test_frozen_counter_is_not_reported_as_zero_energy(step_clock):
    """A counter that stops moving (a stuck driver) while the GPU draws 300 W for 10 s must not
    yield a confident 0 J: the meter should notice (count a fault) and fall back to power."""
    backend = ScriptedBackend()
    backend.counter, backend.power = 1000.0, 300.0
    meter = _scripted_meter(backend, step_clock)
    for _ in range(3):
        meter.sampler.sample_once()
        step_clock.advance(0.1)
    before = meter_faults()
    window = meter.begin(devices=None, info=CallInfo(model_name="m"))
    for _ in range(100):  # 10 s of 300 W with the counter stuck at 1000 J
        step_clock.advance(0.1)
        meter.sampler.sample_once()
    record = meter.end(window, tokens=1, requests=1)
    assert meter_faults() > before, "a frozen counter was not counted as a fault"
    assert record.energy_j == pytest.approx(3000.0, rel=0.1) or not record.complete


def test_absurd_counter_jump_is_not_attributed(step_clock):
    """The counter leaps by 1 GJ in 0.1 s (a 10 GW GPU): garbage, not physics. The call must not
    be charged a gigajoule, and the fault must be counted."""
    backend = ScriptedBackend(power_limit_w=400.0)
    backend.counter, backend.power = 0.0, 300.0
    meter = _scripted_meter(backend, step_clock)
    meter.sampler.sample_once()
    window = meter.begin(devices=None, info=CallInfo(model_name="m"))
    step_clock.advance(0.1)
    backend.counter = 30.0
    meter.sampler.sample_once()
    step_clock.advance(0.1)
    backend.counter = 30.0 + 1e9
    record = meter.end(window, tokens=1, requests=1)
    assert meter_faults() >= 1
    assert record.energy_j < 3 * 400.0 * 0.2  # at most 3x TDP over the 0.2 s window


# A step of the fuzzed GPU: how long passed, what the counter did, what power said, and what
# the application did at that moment.
_POWER = st.one_of(
    st.floats(0.0, 400.0),
    st.sampled_from((-5.0, -1e9, 1201.0, 1e12, math.inf, -math.inf, math.nan)),
)
_COUNTER = st.one_of(
    st.floats(0.0, 60.0),  # a plausible increment
    st.just(0.0),  # frozen
    st.sampled_from(("reset", "wrap", "none", "lost", "not_supported")),
)
_STEP = st.tuples(
    st.floats(0.0, 0.5),
    _COUNTER,
    _POWER,
    st.sampled_from(("sample", "begin", "end", "sample", "states")),
)


@hsettings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(_STEP, min_size=1, max_size=40), quantised=st.booleans())
def test_garbage_readings_never_crash_and_never_poison_the_figures(step_clock, steps, quantised):
    """Any sequence of sane, absurd, frozen, reset, wrapped, missing and failing readings: no
    exception escapes begin/end/sample/gpu_states; every energy figure stays finite, >= 0 and
    monotonic; every record carries its tier; garbage power is counted as a fault."""
    reset_faults()
    backend = ScriptedBackend(quantised=quantised)
    backend.counter, backend.power = 1000.0, 100.0
    meter = _scripted_meter(backend, step_clock)
    open_windows: list[Any] = []
    records = []
    last_total = 0.0
    garbage_power_reads = 0
    for dt, counter, power, action in steps:
        step_clock.advance(dt)
        backend.fail = None
        if counter == "reset":
            backend.counter = 0.0
        elif counter == "wrap":
            backend.counter = float(dt)  # small after a huge value is a wrap to the meter
        elif counter == "none":
            backend.counter = None
        elif counter == "lost":
            backend.fail = DeviceLostError("GPU is lost")
        elif counter == "not_supported":
            backend.fail = NotSupportedError("not supported")
        else:
            base = backend.counter if backend.counter is not None else 1000.0
            backend.counter = base + counter
        backend.power = power
        insane = not (math.isfinite(power) and 0.0 <= power <= 3 * 400.0)
        if action == "sample":
            before = meter.tracks[0].reads
            meter.sampler.sample_once()
            if insane and meter.tracks[0].reads > before:
                garbage_power_reads += 1
        elif action == "begin":
            open_windows.append(meter.begin(devices=None, info=CallInfo(model_name="m")))
        elif action == "end" and open_windows:
            record = meter.end(open_windows.pop(0), tokens=3, requests=1)
            if record is not None:
                records.append(record)
        else:
            for state in meter.gpu_states():
                assert state.tier == "live"
                assert math.isfinite(state.energy_j_total) and state.energy_j_total >= 0
                assert state.energy_j_total >= last_total - 1e-9
                last_total = state.energy_j_total
    for window in open_windows:
        record = meter.end(window, tokens=1, requests=1)
        if record is not None:
            records.append(record)
    for record in records:
        assert record.tier == "live"
        assert math.isfinite(record.energy_j) and record.energy_j >= 0
        assert record.cost_usd is None or math.isfinite(record.cost_usd)
    if garbage_power_reads:
        assert fault_counts().get("meter.absurd_power", 0) >= garbage_power_reads
    meter.stop()
