"""The meter: energy per generate call from NVML (or a simulated GPU), attributed and recorded.

Importing this package starts nothing and imports no vendor library: ``pynvml`` is imported only
when the NVML backend is probed, the sampler thread starts with :func:`start_meter`. The meter
starts only itself: the ledger and the metrics server beside it come from
:func:`ecoguard.services.start_services`.
"""

from __future__ import annotations

from ecoguard.energy.meter import (
    PROCESS_METER,
    CallInfo,
    CallWindow,
    GenerationRecord,
    GpuState,
    Meter,
    MeterSlot,
    can_measure,
    get_meter,
    start_meter,
    stop_meter,
)

__all__ = [
    "PROCESS_METER",
    "CallInfo",
    "CallWindow",
    "GenerationRecord",
    "GpuState",
    "Meter",
    "MeterSlot",
    "can_measure",
    "get_meter",
    "start_meter",
    "stop_meter",
]
