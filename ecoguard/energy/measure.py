"""``with ecoguard.measure("label") as m:``: the energy of a block of code.

``m.energy_j`` is the whole energy of the block's GPUs between entering and leaving the block
(read directly, not shared with other calls: the block did use the GPU for all of it). The GPUs are
those of the generate calls that ended inside the block, or the meter's default GPUs when none did.
``m.tokens`` sums the tokens of generate records that ended inside the block on this thread (or
asyncio task), plus anything added with ``m.add_tokens(n)``. ``m.attributed_energy_j`` is the sum
of those records' own shares. When no meter is running, entering the block starts one from the
environment's settings (the meter only; ``ecoguard.measure``, :func:`ecoguard.services.measure`,
starts the ledger its records go to as well).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ecoguard.energy.meter import GenerationRecord, Meter, _collectors, get_meter, start_meter


class Measurement:
    """The result of one ``measure`` block; figures are final once the block exits."""

    def __init__(self, label: str | None, meter: Meter) -> None:
        self.label = label
        self._meter = meter
        self._lock = threading.Lock()
        self.records: list[GenerationRecord] = []
        self._manual_tokens = 0
        self._start_j: dict[int, float] = {}
        self._start_t = 0.0
        self._end_t: float | None = None
        self.energy_j: float | None = None
        self.gpus: tuple[str, ...] = ()
        self.gpu_indices: tuple[int, ...] = ()
        self.tier: str = meter.tier

    def add_tokens(self, n: int) -> None:
        """Count ``n`` tokens produced inside the block by something ecoguard does not see."""
        if n < 0:
            raise ValueError(f"tokens must be >= 0, got {n}")
        with self._lock:
            self._manual_tokens += int(n)

    def _add_record(self, record: GenerationRecord) -> None:
        with self._lock:
            self.records.append(record)

    @property
    def tokens(self) -> int:
        with self._lock:
            return self._manual_tokens + sum(r.tokens for r in self.records)

    @property
    def attributed_energy_j(self) -> float:
        with self._lock:
            return sum(r.energy_j for r in self.records)

    @property
    def duration_s(self) -> float:
        end = self._end_t if self._end_t is not None else self._meter.clock()
        return max(0.0, end - self._start_t)

    @property
    def joules_per_token(self) -> float | None:
        tokens = self.tokens
        if self.energy_j is None or not tokens:
            return None
        return self.energy_j / tokens

    def _enter(self) -> None:
        self._start_t = self._meter.clock()
        self._start_j = self._meter.read_energy()

    def _exit(self) -> None:
        end_j = self._meter.read_energy()
        self._end_t = self._meter.clock()
        with self._lock:
            used = sorted({i for r in self.records for i in r.gpu_indices})
        indices = used or list(self._meter.default_devices)
        measured = [i for i in indices if i in self._start_j and i in end_j]
        self.gpu_indices = tuple(measured)
        self.gpus = tuple(self._meter.tracks[i].info.name for i in measured)
        self.energy_j = sum(end_j[i] - self._start_j[i] for i in measured) if measured else None

    def __repr__(self) -> str:
        return (
            f"Measurement(label={self.label!r}, energy_j={self.energy_j}, tokens={self.tokens}, "
            f"duration_s={self.duration_s:.3f}, tier={self.tier!r})"
        )


@contextmanager
def measure(label: str | None = None, *, meter: Meter | None = None) -> Iterator[Measurement]:
    """Measure the energy, tokens and duration of the block. See the module docstring."""
    if meter is None:
        meter = get_meter() or start_meter()
    measurement = Measurement(label, meter)
    token = _collectors.set((*_collectors.get(), measurement))
    measurement._enter()
    try:
        yield measurement
    finally:
        _collectors.reset(token)
        measurement._exit()
