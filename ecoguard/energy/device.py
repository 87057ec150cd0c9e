"""What every power backend is: the :class:`PowerBackend` protocol and :class:`DeviceInfo`.

A backend answers in base units (joules, watts, seconds), converted at its boundary. The
backends themselves live beside this module: :mod:`ecoguard.energy.nvml` (an NVIDIA driver),
:mod:`ecoguard.energy.simulated` (a GPU from the knowledge tables) and the null backend in
:mod:`ecoguard.energy.backends`, which also chooses one from the settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

Clock = Callable[[], float]  # monotonic seconds


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """Static facts about one visible device. ``index`` is the visible (CUDA) index."""

    index: int
    name: str
    uuid: str
    architecture: str | None = None
    compute_capability: tuple[int, int] | None = None
    memory_total_bytes: int | None = None
    power_limit_w: float | None = None


@runtime_checkable
class PowerBackend(Protocol):
    """What the meter needs from a source of power readings. Indices are visible indices."""

    name: str  # "nvml", "simulated", "null"
    tier: str  # "live" or "simulated": the tier of every figure derived from this backend
    counter_quantised: bool  # True when the energy counter only changes every ~100 ms

    def device_count(self) -> int: ...

    def device_info(self, index: int) -> DeviceInfo: ...

    def energy_j(self, index: int) -> float | None:
        """Cumulative energy counter in joules, or None when the device has no counter."""
        ...

    def power_w(self, index: int) -> float:
        """Instant power in watts."""
        ...

    def close(self) -> None: ...
