"""A fake NVML driver for tests and benchmarks: real ``pynvml`` ctypes calls, no GPU needed.

``fake_nvml.c`` is a tiny C library named ``libnvidia-ml.so.1`` whose power is a known function of
time (see the C file for the formulas); the energy counter is quantised to ``update_s`` like real
hardware. ``build_library(directory)`` compiles it with gcc. Two ways to use it:

* in a subprocess: put the directory on ``LD_LIBRARY_PATH`` and the ``env()`` of a
  :class:`FakeNvmlConfig` in its environment;
* in this process: ``load_in_process(path)`` loads the library by its full path first, so that
  pynvml's ``CDLL("libnvidia-ml.so.1")`` resolves to it (the dynamic loader matches the soname of
  an already loaded library). Set the ``FAKE_NVML_*`` variables before ``nvmlInit``: the library
  re-reads them on every init, and refuses to initialise (like a machine without a driver) unless
  ``FAKE_NVML_ENABLE=1``.

:meth:`FakeNvmlConfig.energy_j` gives the exact energy of any window in joules, so a test can
compare the meter with the truth.

Time is real (``CLOCK_MONOTONIC``) by default. ``FakeNvmlConfig(clock="manual")`` gives the
driver a clock that moves only when the test moves it, plus ``tick_s`` per reading of energy or
power; :class:`FakeNvmlClock` reads and advances it, and is what the meter under test is given as
its clock (``Meter(clock=clock)``), so a call of five seconds takes no time at all::

    clock = FakeNvmlClock()
    meter = Meter(settings, backend=NvmlBackend.probe(), clock=clock)
    window = meter.begin(devices=(0,), info=info)
    clock.advance(5.0, step_s=meter.sampler.interval_s, on_step=meter.sampler.sample_once)
    record = meter.end(window, tokens=10, requests=1)
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBRARY_NAME = "libnvidia-ml.so.1"
CLOCKS = ("monotonic", "manual")


def gcc_available() -> bool:
    return shutil.which("gcc") is not None


def build_library(directory: str | Path) -> Path:
    """Compile ``fake_nvml.c`` into ``directory/libnvidia-ml.so.1``; returns its path.

    Raises RuntimeError with gcc's message when compilation fails, FileNotFoundError without gcc.
    """
    gcc = shutil.which("gcc")
    if gcc is None:
        raise FileNotFoundError("gcc not found: the fake NVML library cannot be built")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / LIBRARY_NAME
    cmd = [gcc, "-shared", "-fPIC", "-O2", f"-Wl,-soname,{LIBRARY_NAME}", "-o", str(target)]
    result = subprocess.run([*cmd, str(SOURCE), "-lm"], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building the fake NVML failed:\n{result.stderr}")
    return target


def load_in_process(path: str | Path) -> ctypes.CDLL:
    """Load the fake library so this process's pynvml uses it. Returns the ctypes handle."""
    return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)


def _fmt_list(values: tuple[float, ...]) -> str:
    return ",".join(repr(float(v)) for v in values)


def _pick(values: tuple[float, ...], index: int) -> float:
    return values[min(index, len(values) - 1)]


@dataclass(frozen=True)
class FakeNvmlConfig:
    """The fake driver's behaviour. Per-GPU tuples: the last value repeats for further GPUs."""

    gpus: int = 2
    name: str = "NVIDIA A800-SXM4-80GB"
    architecture: int = 7  # NVML_DEVICE_ARCH_AMPERE
    compute_capability: str = "8.0"
    memory_mb: int = 81920
    tdp_w: int = 400
    base_w: tuple[float, ...] = (250.0, 180.0)
    amp_w: tuple[float, ...] = (60.0, 40.0)
    period_s: tuple[float, ...] = (1.7, 2.3)
    phase: tuple[float, ...] = (0.0, 0.5)
    update_s: float = 0.1  # counter update period
    update_offset_s: float = 0.037  # counter updates at offset + k * update_s (monotonic time)
    counter: bool = True  # False: TotalEnergyConsumption answers NOT_SUPPORTED
    lost_after_s: float | None = None  # GPU answers GPU_IS_LOST this long after init
    lost_gpu: int = -1  # which GPU is lost (-1: all)
    reset_after_s: float | None = None  # counter restarts from 0 this long after init
    noise_w: float = 0.0  # uniform +- noise on instant power readings (energy stays exact)
    clock: str = "monotonic"  # "manual": the driver's time moves only when a test moves it
    tick_s: float = 1e-5  # manual clock: how far each reading of energy or power moves it

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {self.clock!r}")
        if not (math.isfinite(self.tick_s) and self.tick_s >= 0):
            raise ValueError(f"tick_s must be a finite number of seconds >= 0, got {self.tick_s!r}")

    def env(self) -> dict[str, str]:
        """The ``FAKE_NVML_*`` variables that make the C library behave like this config."""
        env = {
            "FAKE_NVML_ENABLE": "1",
            "FAKE_NVML_GPUS": str(self.gpus),
            "FAKE_NVML_NAME": self.name,
            "FAKE_NVML_ARCH": str(self.architecture),
            "FAKE_NVML_CC": self.compute_capability,
            "FAKE_NVML_MEM_MB": str(self.memory_mb),
            "FAKE_NVML_TDP_W": str(self.tdp_w),
            "FAKE_NVML_BASE_W": _fmt_list(self.base_w),
            "FAKE_NVML_AMP_W": _fmt_list(self.amp_w),
            "FAKE_NVML_PERIOD_S": _fmt_list(self.period_s),
            "FAKE_NVML_PHASE": _fmt_list(self.phase),
            "FAKE_NVML_UPDATE_S": repr(self.update_s),
            "FAKE_NVML_UPDATE_OFFSET_S": repr(self.update_offset_s),
            "FAKE_NVML_COUNTER": "1" if self.counter else "0",
            "FAKE_NVML_LOST_AFTER_S": "-1"
            if self.lost_after_s is None
            else repr(self.lost_after_s),
            "FAKE_NVML_LOST_GPU": str(self.lost_gpu),
            "FAKE_NVML_NOISE_W": repr(self.noise_w),
            "FAKE_NVML_RESET_AFTER_S": "-1"
            if self.reset_after_s is None
            else repr(self.reset_after_s),
            "FAKE_NVML_CLOCK": self.clock,
            "FAKE_NVML_CLOCK_TICK_S": repr(self.tick_s),
        }
        return env

    def apply(self, environ: dict[str, str] | os._Environ[str] | None = None) -> None:
        """Write ``env()`` into ``environ`` (default ``os.environ``, which C ``getenv`` sees)."""
        (os.environ if environ is None else environ).update(self.env())

    def power_w(self, gpu: int, t: float) -> float:
        """True power of ``gpu`` at the driver's time ``t`` (s), in watts."""
        base, amp = _pick(self.base_w, gpu), _pick(self.amp_w, gpu)
        period, phase = _pick(self.period_s, gpu), _pick(self.phase, gpu)
        return base + amp * math.sin(2 * math.pi * t / period + phase)

    def energy_j(self, gpu: int, t0: float, t1: float) -> float:
        """Exact energy of ``gpu`` between the driver's times ``t0`` and ``t1`` (s), in joules."""
        return self._cumulative_j(gpu, t1) - self._cumulative_j(gpu, t0)

    def _cumulative_j(self, gpu: int, t: float) -> float:
        base, amp = _pick(self.base_w, gpu), _pick(self.amp_w, gpu)
        period, phase = _pick(self.period_s, gpu), _pick(self.phase, gpu)
        w = 2 * math.pi / period
        return base * t - amp / w * (math.cos(w * t + phase) - math.cos(phase))


class FakeNvmlClock:
    """The fake driver's clock, as a callable a meter can use (``Meter(clock=clock)``).

    Calling it gives the driver's time in seconds: ``CLOCK_MONOTONIC`` (what ``time.monotonic``
    reads on Linux) unless the last ``nvmlInit`` saw ``FAKE_NVML_CLOCK=manual``; then the manual
    clock, which only :meth:`advance` (and ``tick_s`` per reading) moves.

    ``library`` must be the library pynvml uses: by default the one the name
    ``libnvidia-ml.so.1`` resolves to, exactly as pynvml opens it (the fake this process loaded
    first, see :func:`load_in_process`, or the one on ``LD_LIBRARY_PATH``). A path to another
    copy of the fake has a clock of its own that pynvml's readings do not see."""

    def __init__(self, library: str | Path | None = None) -> None:
        handle = ctypes.CDLL(str(library) if library is not None else LIBRARY_NAME)
        try:
            self._now = handle.fake_nvml_clock_now
            self._advance = handle.fake_nvml_clock_advance
            self._is_manual = handle.fake_nvml_clock_is_manual
            self._init_time = handle.fake_nvml_init_time
        except AttributeError as exc:
            raise RuntimeError(
                f"{library or LIBRARY_NAME} is not the fake NVML library (no clock functions): "
                "build it with build_library() and load it first"
            ) from exc
        self._now.restype = ctypes.c_double
        self._now.argtypes = []
        self._advance.restype = ctypes.c_int
        self._advance.argtypes = [ctypes.c_double]
        self._is_manual.restype = ctypes.c_int
        self._is_manual.argtypes = []
        self._init_time.restype = ctypes.c_double
        self._init_time.argtypes = []

    def __call__(self) -> float:
        return float(self._now())

    @property
    def manual(self) -> bool:
        """Whether the driver runs on the manual clock (decided at its last ``nvmlInit``)."""
        return bool(self._is_manual())

    @property
    def init_s(self) -> float:
        """The driver's time at its last successful ``nvmlInit``: ``lost_after_s`` and
        ``reset_after_s`` count from it."""
        return float(self._init_time())

    def advance(
        self,
        seconds: float,
        *,
        step_s: float | None = None,
        on_step: Callable[[], object] | None = None,
    ) -> None:
        """Move the manual clock on by ``seconds``. With ``step_s``, move in steps of at most
        that long and call ``on_step()`` after each (a sampler's pass, say), as a thread waking
        every ``step_s`` would. Raises RuntimeError when the driver is not on the manual clock,
        ValueError for a negative or non-finite time."""
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"the clock only moves forward: got {seconds!r} s")
        if step_s is not None and not (math.isfinite(step_s) and step_s > 0):
            raise ValueError(f"step_s must be a finite number of seconds > 0, got {step_s!r}")
        self._move(0.0)  # fails here, before any step, when the clock is not manual
        if step_s is None:
            self._move(seconds)
            if on_step is not None:
                on_step()
            return
        left = seconds
        while left > 1e-12:
            step = min(step_s, left)
            self._move(step)
            left -= step
            if on_step is not None:
                on_step()

    def advance_to(
        self,
        t: float,
        *,
        step_s: float | None = None,
        on_step: Callable[[], object] | None = None,
    ) -> None:
        """Move the manual clock on to time ``t`` (s), stepping as :meth:`advance` does;
        ValueError if ``t`` is already past."""
        now = self()
        if t < now:
            raise ValueError(f"the clock is at {now:.6f} s, already past {t:.6f} s")
        self.advance(t - now, step_s=step_s, on_step=on_step)

    def sleep(self, seconds: float) -> None:
        """``time.sleep`` on the manual clock (for a ``sleep=`` seam): advances, returns at once."""
        self.advance(max(0.0, seconds))

    def _move(self, seconds: float) -> None:
        code = self._advance(seconds)
        if code == 1:
            raise RuntimeError(
                "the fake NVML driver runs in real time: enable FakeNvmlConfig(clock='manual') "
                "and call nvmlInit before advancing its clock"
            )
        if code != 0:
            raise ValueError(f"the fake NVML clock cannot advance by {seconds!r} s")
