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
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBRARY_NAME = "libnvidia-ml.so.1"


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


def load_in_process(path: str | Path) -> object:
    """Load the fake library so this process's pynvml uses it. Returns the ctypes handle."""
    import ctypes

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
        }
        return env

    def apply(self, environ: dict[str, str] | os._Environ[str] | None = None) -> None:
        """Write ``env()`` into ``environ`` (default ``os.environ``, which C ``getenv`` sees)."""
        (os.environ if environ is None else environ).update(self.env())

    def power_w(self, gpu: int, t: float) -> float:
        """True power of ``gpu`` at monotonic time ``t`` (s), in watts."""
        base, amp = _pick(self.base_w, gpu), _pick(self.amp_w, gpu)
        period, phase = _pick(self.period_s, gpu), _pick(self.phase, gpu)
        return base + amp * math.sin(2 * math.pi * t / period + phase)

    def energy_j(self, gpu: int, t0: float, t1: float) -> float:
        """Exact energy of ``gpu`` between monotonic times ``t0`` and ``t1`` (s), in joules."""
        return self._cumulative_j(gpu, t1) - self._cumulative_j(gpu, t0)

    def _cumulative_j(self, gpu: int, t: float) -> float:
        base, amp = _pick(self.base_w, gpu), _pick(self.amp_w, gpu)
        period, phase = _pick(self.period_s, gpu), _pick(self.phase, gpu)
        w = 2 * math.pi / period
        return base * t - amp / w * (math.cos(w * t + phase) - math.cos(phase))
