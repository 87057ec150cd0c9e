"""``with ecoguard.measure("label") as m:``: the energy of a block of code.

``m.energy_j`` is the whole energy of the block's GPUs between entering and leaving the block
(read directly, not shared with other calls: the block did use the GPU for all of it). The GPUs are
those of the generate calls that ended inside the block, or the meter's default GPUs when none did.
``m.tokens`` sums the tokens of generate records that ended inside the block on this thread (or
asyncio task), plus anything added with ``m.add_tokens(n)``. ``m.attributed_energy_j`` is the sum
of those records' own shares. When no meter is running, entering the block starts one from the
environment's settings (the meter only; ``ecoguard.measure``, :func:`ecoguard.services.measure`,
starts the ledger its records go to as well).

Without a GPU to read (no NVIDIA driver, ``ECOGUARD_BACKEND=null``) the block still counts the
tokens of the generate calls inside it, ``m.energy_j`` and ``m.joules_per_token`` stay None,
``m.tier`` is ``unmeasured``, ``m.unmeasured_reason`` says why, and entering the block warns once
per place in the code (an ``ecoguard.UnmeasuredWarning`` naming ``ECOGUARD_BACKEND=simulated``). No
:class:`GenerationRecord` is made for those calls, so ``on_record`` callbacks, the ledger and the
metrics see none: a record is a measurement, and a call with tokens but no joules would pull every
J/token figure built from records (ledger totals, Prometheus rates) towards zero.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ecoguard.energy.backends import unmeasured_reason
from ecoguard.energy.meter import (
    PROCESS_METER,
    GenerationRecord,
    Meter,
    MeterSlot,
    _collectors,
    get_meter,
    start_meter,
)
from ecoguard.errors import UnmeasuredWarning

UNMEASURED = "unmeasured"


class Measurement:
    """The result of one ``measure`` block; figures are final once the block exits."""

    def __init__(self, label: str | None, meter: Meter) -> None:
        self.label = label
        self._meter = meter
        self._lock = threading.Lock()
        self.records: list[GenerationRecord] = []
        self._manual_tokens = 0
        self._unmeasured_tokens = 0
        self._start_j: dict[int, float] = {}
        self._start_t = 0.0
        self._end_t: float | None = None
        self.energy_j: float | None = None
        self.gpus: tuple[str, ...] = ()
        self.gpu_indices: tuple[int, ...] = ()
        # Why no energy can be read (None when the meter has a GPU); tier says so too.
        self.unmeasured_reason: str | None = unmeasured_reason(meter.backend, len(meter.tracks))
        self.tier: str = meter.tier if self.unmeasured_reason is None else UNMEASURED

    def add_tokens(self, n: int) -> None:
        """Count ``n`` tokens produced inside the block by something ecoguard does not see."""
        if n < 0:
            raise ValueError(f"tokens must be >= 0, got {n}")
        with self._lock:
            self._manual_tokens += int(n)

    def _add_record(self, record: GenerationRecord) -> None:
        with self._lock:
            self.records.append(record)

    def _add_unmeasured(self, tokens: int) -> None:
        """Tokens of a generate call that no meter could measure (no record exists for it)."""
        with self._lock:
            self._unmeasured_tokens += int(tokens)

    @property
    def tokens(self) -> int:
        with self._lock:
            recorded = sum(r.tokens for r in self.records)
            return self._manual_tokens + self._unmeasured_tokens + recorded

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
        if self.energy_j is None:
            self.tier = UNMEASURED

    def __repr__(self) -> str:
        return (
            f"Measurement(label={self.label!r}, energy_j={self.energy_j}, tokens={self.tokens}, "
            f"duration_s={self.duration_s:.3f}, tier={self.tier!r})"
        )


class _TokenCounter:
    """Stands in the guard's meter slot while a ``measure`` block is open and the guard has no
    meter to measure with (no GPU): the guard then hands each generate call's tokens to the open
    blocks of its context. It makes no record (there is no energy to record)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0

    def lend(self, slot: MeterSlot) -> None:
        with self._lock:
            self._open += 1
            if slot.measurable is None:
                slot.measurable = self  # type: ignore[assignment]

    def give_back(self, slot: MeterSlot) -> None:
        with self._lock:
            self._open -= 1
            if self._open == 0 and slot.measurable is self:
                slot.measurable = None

    def begin(self, *, devices: tuple[int, ...] | None = None, info: Any = None) -> object:
        return self

    def end(self, window: object, *, tokens: int, requests: int, **_: Any) -> None:
        for collector in _collectors.get():
            collector._add_unmeasured(tokens)

    def gpu_states(self) -> list[Any]:
        return []


# One per process, like the meter slot it lends itself to.
TOKEN_COUNTER = _TokenCounter()


def _warn_unmeasured(measurement: Measurement) -> None:
    """Once per place in the user's code (Python's default warning filter), at that place."""
    level, frame = 2, sys._getframe(1)  # level 1 is this function
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] in (
        "ecoguard",
        "contextlib",
    ):
        level, frame = level + 1, frame.f_back
    label = f"({measurement.label!r})" if measurement.label is not None else "()"
    warnings.warn(
        f"ecoguard.measure{label} measures no energy here: {measurement.unmeasured_reason}. "
        "The tokens of guarded generate calls are still counted (and m.add_tokens); energy_j "
        "and joules_per_token stay None and tier is "
        "'unmeasured'. For simulated figures without a GPU set ECOGUARD_BACKEND=simulated; "
        "`ecoguard doctor` shows what the meter sees.",
        UnmeasuredWarning,
        stacklevel=level,
    )


@contextmanager
def measure(label: str | None = None, *, meter: Meter | None = None) -> Iterator[Measurement]:
    """Measure the energy, tokens and duration of the block. See the module docstring."""
    if meter is None:
        meter = get_meter() or start_meter()
    measurement = Measurement(label, meter)
    if measurement.unmeasured_reason is not None:
        _warn_unmeasured(measurement)
    token = _collectors.set((*_collectors.get(), measurement))
    TOKEN_COUNTER.lend(PROCESS_METER)
    measurement._enter()
    try:
        yield measurement
    finally:
        TOKEN_COUNTER.give_back(PROCESS_METER)
        _collectors.reset(token)
        measurement._exit()
