"""The simulated backend: one GPU from the knowledge tables, for machines without one.

Its power follows whether generate calls are running (idle power otherwise) and its counter
integrates that power exactly; every figure it yields has tier ``simulated``. Built from settings
it keeps its own clock (:class:`SimulatedWork`): a call takes the GPU time the reference
throughput gives for its tokens and batch size, not this machine's time, so the same calls give
the same joules on any machine.
"""

from __future__ import annotations

import itertools
import math
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from ecoguard.energy.device import Clock, DeviceInfo
from ecoguard.errors import BackendError
from ecoguard.knowledge import find_rows, resolve_gpu


@dataclass(frozen=True, slots=True)
class SimulatedWork:
    """How long the simulated GPU takes to generate, from the reference data (deterministic).

    ``tokens_per_s`` is the generated tokens per second at batch size 1; ``batch_speedup`` the
    measured throughput multiple at larger batches, as ``(batch_size, multiple)`` pairs. A call
    that generates ``tokens`` (counted over all sequences) at batch size ``B`` takes
    ``tokens / (tokens_per_s x speedup(B))`` seconds of GPU time; the speedup is interpolated
    in log2(batch) between measured sizes and held at the largest one beyond it. Prefill and
    the model's size and precision are not modelled: every model and precision runs at the
    GPU's reference throughput."""

    tokens_per_s: float
    batch_speedup: tuple[tuple[int, float], ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if not self.tokens_per_s > 0:
            raise BackendError(
                f"simulated throughput must be > 0 tokens/s, got {self.tokens_per_s}"
            )

    def speedup(self, batch_size: int) -> float:
        """Throughput at ``batch_size`` as a multiple of batch size 1's."""
        points = sorted({1: 1.0, **dict(self.batch_speedup)}.items())
        batch = max(1, int(batch_size))
        if batch >= points[-1][0]:
            return points[-1][1]
        for (b0, s0), (b1, s1) in itertools.pairwise(points):
            if b0 <= batch <= b1:
                share = (math.log2(batch) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
                return s0 + (s1 - s0) * share
        return 1.0

    def gpu_seconds(self, tokens: int, batch_size: int) -> float:
        """GPU time for a call that generated ``tokens`` tokens at ``batch_size``."""
        return max(0, int(tokens)) / (self.tokens_per_s * self.speedup(batch_size))

    def describe(self) -> str:
        """The model in one clause: throughput at batch 1 and the batch multiples used."""
        text = f"{self.tokens_per_s:.3g} tokens/s at batch size 1"
        if self.batch_speedup:
            shown = [(b, s) for b, s in self.batch_speedup if b in (8, self.batch_speedup[-1][0])]
            multiples = ", ".join(f"x{s:.3g} at {b}" for b, s in shown)
            text += f", batch B x its measured multiple ({multiples})"
        else:
            text += ", batch B x B"
        return f"{text} [{self.source}]"


class SimulatedBackend:
    """One simulated GPU: idle power, or a busy power while generate calls run on it.

    The energy counter integrates the piecewise-constant power exactly (so it is not quantised).
    The meter tells it how many calls are open through :meth:`set_active`.

    Without ``work`` the power is integrated over ``clock`` (a test's fake clock, say). With
    ``work`` the GPU keeps its own clock (:meth:`gpu_time`, which the meter adopts): it follows
    ``clock`` while no call is open, stands still while calls are open, and moves on by the
    modelled GPU time of each call when the meter reports the call's tokens
    (:meth:`simulate_call`, just before the call's end is read). So a call's joules are
    ``busy_w x work.gpu_seconds(tokens, batch)`` whatever this machine's speed or load."""

    name = "simulated"
    tier = "simulated"
    counter_quantised = False

    def __init__(
        self,
        *,
        gpu_name: str,
        profile_key: str | None,
        idle_w: float,
        busy_w: float,
        architecture: str | None = None,
        memory_total_bytes: int | None = None,
        power_limit_w: float | None = None,
        clock: Clock = time.monotonic,
        source: str = "",
        work: SimulatedWork | None = None,
    ) -> None:
        if not 0 <= idle_w <= busy_w:
            raise BackendError(
                f"simulated power must satisfy 0 <= idle <= busy, got {idle_w}, {busy_w}"
            )
        self.profile_key = profile_key
        self.idle_w = float(idle_w)
        self.busy_w = float(busy_w)
        self.source = source
        self.work = work
        self._clock = clock
        self._info = DeviceInfo(
            index=0,
            name=gpu_name,
            uuid=f"SIM-{profile_key or 'gpu'}-0",
            architecture=architecture,
            memory_total_bytes=memory_total_bytes,
            power_limit_w=power_limit_w,
        )
        self._lock = threading.Lock()
        self._active = 0
        self._energy_j = 0.0
        self._energy_read_j = 0.0  # the counter as last read (see set_active)
        # The GPU's own time (with ``work``): ``_gpu_t`` at wall time ``_wall_t``.
        self._wall_t = clock()
        self._gpu_t = self._wall_t
        self._last_t = self._wall_t

    @classmethod
    def from_settings(cls, settings: Any, *, clock: Clock = time.monotonic) -> SimulatedBackend:
        """The GPU named by ``settings.simulated_gpu``, powered and timed from the reference rows.

        Busy power is the median measured power of the reference rows for that GPU (TDP x 0.7
        when there are none); idle power is the profile's idle figure (TDP x 0.15 when unknown);
        the GPU time of a call comes from :func:`simulated_work`."""
        profile = resolve_gpu(settings.simulated_gpu)
        powers = [r.power_w for r in find_rows(gpu=profile.key) if r.power_w]
        busy_w = statistics.median(powers) if powers else 0.7 * float(profile.tdp_w)
        idle_w = float(profile.idle_w) if profile.idle_w else 0.15 * float(profile.tdp_w)
        source = (
            f"median of {len(powers)} {profile.key} reference rows"
            if powers
            else f"0.7 x TDP of {profile.key} (no reference rows)"
        )
        return cls(
            gpu_name=profile.name,
            profile_key=profile.key,
            idle_w=min(idle_w, busy_w),
            busy_w=busy_w,
            architecture=profile.architecture,
            memory_total_bytes=int(profile.vram_gb * 1024**3) if profile.vram_gb else None,
            power_limit_w=float(profile.tdp_w) if profile.tdp_w else None,
            clock=clock,
            source=source,
            work=simulated_work(profile.key),
        )

    @property
    def gpu_clock(self) -> Clock | None:
        """The clock the meter should use with this backend (None: the meter's own)."""
        return self.gpu_time if self.work is not None else None

    def assumptions(self) -> str:
        """What this simulation assumes, in one sentence (shown wherever its figures are)."""
        power = f"{self.busy_w:.4g} W generating [{self.source}], {self.idle_w:.4g} W idle"
        if self.work is None:
            return f"{power}; calls last as long as they take on this machine"
        return (
            f"{power}; {self.work.describe()}; a call lasts that GPU time, not this machine's "
            "(prefill, model size and precision not modelled)"
        )

    def rearm_in_child(self) -> None:
        """In a forked child: a fresh lock (a parent thread may have held it at the fork)."""
        self._lock = threading.Lock()

    def set_active(self, index: int, active: int) -> None:
        """``active`` generate calls are now open on device ``index`` (power changes now)."""
        with self._lock:
            if self.work is not None and not self._active and active > 0:
                # The call starts at the meter's energy reading just taken: the few microseconds
                # of idle since then are dropped, so the call's window holds its work only.
                self._advance()
                self._energy_j = self._energy_read_j
                self._active = active
                return
            self._advance()
            was_active = self._active
            self._active = max(0, active)
            if was_active and not self._active:
                self._wall_t = self._clock()  # the GPU's clock follows the wall clock again

    def simulate_call(self, index: int, *, tokens: int, batch_size: int) -> None:
        """A call on device ``index`` generated ``tokens`` tokens at ``batch_size``: with a work
        model, run its GPU time now at busy power (without one, nothing to do)."""
        self._check(index)
        if self.work is None:
            return
        seconds = self.work.gpu_seconds(tokens, batch_size)
        with self._lock:
            self._advance()
            self._gpu_t += seconds
            self._energy_j += self.busy_w * seconds
            self._last_t = self._gpu_t

    def gpu_time(self) -> float:
        """The simulated GPU's clock (s), monotonic; see the class docstring."""
        with self._lock:
            self._advance()  # settle the energy up to now at the power it ran at
            return self._gpu_t

    def _now(self) -> float:
        if self.work is None:
            return self._clock()
        if not self._active:
            wall = self._clock()
            self._gpu_t += max(0.0, wall - self._wall_t)
            self._wall_t = wall
        return self._gpu_t

    def _advance(self) -> None:
        now = self._now()
        power = self.busy_w if self._active else self.idle_w
        self._energy_j += power * max(0.0, now - self._last_t)
        self._last_t = max(self._last_t, now)

    def device_count(self) -> int:
        return 1

    def device_info(self, index: int) -> DeviceInfo:
        self._check(index)
        return self._info

    def energy_j(self, index: int) -> float | None:
        self._check(index)
        with self._lock:
            self._advance()
            self._energy_read_j = self._energy_j
            return self._energy_j

    def power_w(self, index: int) -> float:
        self._check(index)
        with self._lock:
            return self.busy_w if self._active else self.idle_w

    def close(self) -> None:
        return None

    def _check(self, index: int) -> None:
        if index != 0:
            raise BackendError(f"the simulated backend has one GPU (index 0), not {index}")


def simulated_work(profile_key: str) -> SimulatedWork:
    """The simulated GPU's throughput from the reference rows (whole-call rows only).

    Batch size 1: the median throughput of the GPU's own rows; without any, the median of every
    GPU's rows scaled by memory bandwidth (decode at batch 1 is bandwidth-bound). Larger
    batches: the median, over same-session ladders (one model, precision and source measured at
    several batch sizes), of throughput(B) / throughput(1); the GPU's own ladders, else every
    GPU's, and the source says which."""
    rows = [r for r in find_rows() if r.scope == "end_to_end" and r.throughput_tok_s]
    own = [r for r in rows if r.gpu == profile_key]
    singles = [r.throughput_tok_s for r in own if r.batch_size == 1]
    if singles:
        tokens_per_s = statistics.median(singles)
        source = f"median of {len(singles)} batch-1 rows"
    else:
        bandwidth = resolve_gpu(profile_key).mem_bandwidth_gbs
        scaled = [
            r.throughput_tok_s * bandwidth / resolve_gpu(r.gpu).mem_bandwidth_gbs
            for r in rows
            if r.batch_size == 1 and resolve_gpu(r.gpu).mem_bandwidth_gbs
        ]
        tokens_per_s = statistics.median(scaled)
        source = f"no {profile_key} rows: median of {len(scaled)} other GPUs' rows x bandwidth"
    ladders = _batch_ladders(own) or _batch_ladders(rows)
    gpus = sorted({gpu for gpu, _ in ladders})
    multiples: dict[int, list[float]] = {}
    for ladder in ladders.values():
        for batch, multiple in ladder.items():
            multiples.setdefault(batch, []).append(multiple)
    speedup = tuple((b, statistics.median(m)) for b, m in sorted(multiples.items()))
    if speedup:
        source += f"; multiples from {len(ladders)} {'/'.join(gpus)} batch ladders"
    return SimulatedWork(tokens_per_s=tokens_per_s, batch_speedup=speedup, source=source)


def _batch_ladders(rows: list[Any]) -> dict[tuple[str, tuple[str, str, str]], dict[int, float]]:
    """Per session (GPU, model, precision, source): {batch size > 1: throughput / batch 1's}."""
    sessions: dict[tuple[str, tuple[str, str, str]], dict[int, float]] = {}
    for row in rows:
        if row.batch_size:
            key = (row.gpu, (row.model_id, row.precision, row.source))
            sessions.setdefault(key, {})[int(row.batch_size)] = row.throughput_tok_s
    return {
        key: {b: t / by_batch[1] for b, t in by_batch.items() if b > 1}
        for key, by_batch in sessions.items()
        if 1 in by_batch and len(by_batch) > 1
    }
