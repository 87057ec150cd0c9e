"""Power backends: where the meter's readings come from, and which one a process uses.

Every backend answers the small :class:`~ecoguard.energy.device.PowerBackend` protocol in base
units converted at its boundary (NVML's mJ and mW become J and W):

* ``nvml`` (:mod:`ecoguard.energy.nvml`): a real NVIDIA driver through nvidia-ml-py, imported
  only when it is probed; ``CUDA_VISIBLE_DEVICES`` is respected.
* ``simulated`` (:mod:`ecoguard.energy.simulated`): one GPU from the knowledge tables whose power
  follows whether generate calls are running; tier ``simulated``.
* ``null`` (here): no devices; the meter runs and measures nothing.

:func:`choose_backend` picks one from :class:`~ecoguard.config.Settings` (``auto``: nvml when it
initialises, else null). The backends, the protocol and :class:`DeviceInfo` are importable from
here as well as from their own modules.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from ecoguard.energy.device import Clock, DeviceInfo, PowerBackend
from ecoguard.energy.nvml import NvmlBackend, parse_visible_devices
from ecoguard.energy.simulated import SimulatedBackend, SimulatedWork, simulated_work
from ecoguard.errors import BackendError

__all__ = [
    "Clock",
    "DeviceInfo",
    "MeasurementStatus",
    "NullBackend",
    "NvmlBackend",
    "PowerBackend",
    "SimulatedBackend",
    "SimulatedWork",
    "choose_backend",
    "measurement_status",
    "parse_visible_devices",
    "simulated_work",
    "unmeasured_reason",
]

_log = logging.getLogger("ecoguard.energy")


class NullBackend:
    """No devices. The meter still runs, records carry no energy, nothing raises.

    ``reason`` says why no GPU is read (for ``measure``'s warning and ``ecoguard doctor``)."""

    name = "null"
    tier = "live"
    counter_quantised = False

    def __init__(self, reason: str = "no power backend") -> None:
        self.reason = reason

    def device_count(self) -> int:
        return 0

    def device_info(self, index: int) -> DeviceInfo:
        raise BackendError(f"null backend has no device {index}")

    def energy_j(self, index: int) -> float | None:
        raise BackendError(f"null backend has no device {index}")

    def power_w(self, index: int) -> float:
        raise BackendError(f"null backend has no device {index}")

    def close(self) -> None:
        return None


def choose_backend(settings: Any, *, clock: Clock = time.monotonic) -> PowerBackend:
    """The backend ``settings.backend`` names; ``auto``: NVML when it initialises, else null.

    An explicit ``nvml`` that cannot start raises BackendError (the user asked for it); ``auto``
    falls back quietly, logging why at debug level."""
    choice = getattr(settings, "backend", "auto")
    if choice == "null":
        return NullBackend("ECOGUARD_BACKEND=null turns measurement off")
    if choice == "simulated":
        return SimulatedBackend.from_settings(settings, clock=clock)
    if choice == "nvml":
        return NvmlBackend.probe()
    try:
        return NvmlBackend.probe()
    except BackendError as exc:
        _log.debug("NVML unavailable, metering with the null backend: %s", exc)
        return NullBackend(f"no NVIDIA driver answered ({exc})")


@dataclass(frozen=True, slots=True)
class MeasurementStatus:
    """Whether a meter started from these settings would measure energy, and why not."""

    on: bool
    backend: str  # the backend chosen: nvml, simulated or null
    gpus: int
    tier: str  # live or simulated when on, else unmeasured
    reason: str | None  # why measurement is off (None when on)


def unmeasured_reason(backend: PowerBackend, gpus: int) -> str | None:
    """Why a meter on ``backend`` with ``gpus`` GPUs measures nothing (None when it measures)."""
    if gpus > 0:
        return None
    return getattr(backend, "reason", None) or f"the {backend.name} backend sees no GPU"


def measurement_status(settings: Any) -> MeasurementStatus:
    """Probe the backend ``settings`` choose, as a meter would, and release it."""
    try:
        backend = choose_backend(settings)
    except BackendError as exc:  # an explicit nvml that cannot start
        return MeasurementStatus(False, settings.backend, 0, "unmeasured", str(exc))
    try:
        gpus = backend.device_count()
    finally:
        backend.close()
    reason = unmeasured_reason(backend, gpus)
    tier = backend.tier if reason is None else "unmeasured"
    return MeasurementStatus(reason is None, backend.name, gpus, tier, reason)
