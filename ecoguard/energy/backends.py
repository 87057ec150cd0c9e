"""Power backends: where the meter's readings come from.

Every backend answers the same small :class:`PowerBackend` protocol, in base units converted at the
boundary (NVML's mJ and mW become J and W here):

* ``nvml``: a real NVIDIA driver through nvidia-ml-py (``import pynvml``, imported lazily inside
  :func:`NvmlBackend.probe` so ``import ecoguard.energy`` never loads it). Energy comes from the
  total-energy counter (Volta and newer), instant power from field 186
  (``NVML_FI_DEV_POWER_INSTANT``) with ``nvmlDeviceGetPowerUsage`` as the last resort. NVML errors
  become :class:`~ecoguard.errors.NotSupportedError`, :class:`~ecoguard.errors.DeviceLostError` or
  :class:`~ecoguard.errors.BackendError`.
* ``simulated``: one GPU from the knowledge tables whose power follows whether generate calls are
  running (idle power otherwise); its counter integrates that power exactly. Tier ``simulated``.
  Built from settings it keeps its own clock (:class:`SimulatedWork`): a call takes the GPU time
  the reference throughput gives for its tokens and batch size, not this machine's time, so the
  same calls give the same joules on any machine.
* ``null``: no devices; the meter runs and measures nothing.

:func:`choose_backend` picks one from :class:`~ecoguard.config.Settings` (``auto``: nvml when it
initialises, else null). ``CUDA_VISIBLE_DEVICES`` is respected: visible index ``i`` is the ``i``-th
device it names, by index or UUID, exactly as CUDA numbers them inside the process.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ecoguard.errors import BackendError, DeviceLostError, NotSupportedError

_log = logging.getLogger("ecoguard.energy")

Clock = Callable[[], float]

# NVML return codes this module cares about (values from nvml.h; stable across drivers).
_NVML_ERROR_NOT_SUPPORTED = 3
_NVML_ERROR_FUNCTION_NOT_FOUND = 13
_NVML_ERROR_GPU_IS_LOST = 15
_NVML_ERROR_RESET_REQUIRED = 16
_NVML_ERROR_GPU_NOT_FOUND = 28
_NVML_FI_DEV_POWER_INSTANT = 186
_LOST_CODES = frozenset(
    {_NVML_ERROR_GPU_IS_LOST, _NVML_ERROR_RESET_REQUIRED, _NVML_ERROR_GPU_NOT_FOUND}
)
_UNSUPPORTED_CODES = frozenset({_NVML_ERROR_NOT_SUPPORTED, _NVML_ERROR_FUNCTION_NOT_FOUND})

# nvmlDeviceArchitecture_t -> the architecture names used across ecoguard.
_NVML_ARCHITECTURES: dict[int, str] = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
}


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


class NullBackend:
    """No devices. The meter still runs, records carry no energy, nothing raises."""

    name = "null"
    tier = "live"
    counter_quantised = False

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


def parse_visible_devices(value: str | None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as a list of entries (indices or UUID prefixes); None if unset.

    CUDA stops at the first entry it cannot parse; an empty string hides every device."""
    if value is None:
        return None
    entries: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            break
        if entry.isdigit() or entry.startswith(("GPU-", "MIG-")):
            entries.append(entry)
        elif entry.startswith("-") and entry[1:].isdigit():
            break  # a negative index ends the list in CUDA
        else:
            break
    return entries


class NvmlBackend:
    """Readings from an NVIDIA driver through nvidia-ml-py."""

    name = "nvml"
    tier = "live"
    counter_quantised = True

    def __init__(self, pynvml: Any, handles: list[Any], physical: list[int]) -> None:
        self._nvml = pynvml
        self._handles = handles
        self._physical = physical  # visible index -> physical NVML index (for labels, logs)
        self._no_counter: set[int] = set()
        self._no_instant: set[int] = set()
        self._info: dict[int, DeviceInfo] = {}
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def probe(cls, *, visible_devices: str | None = None) -> NvmlBackend:
        """Initialise NVML and enumerate the visible devices; BackendError if it cannot."""
        try:
            import pynvml
        except ImportError as exc:
            raise BackendError(
                "nvidia-ml-py is not installed (pip install 'ecoguard[nvml]')"
            ) from exc
        try:
            pynvml.nvmlInit()
        except Exception as exc:
            raise _map_error(exc, "nvmlInit") from exc
        try:
            count = pynvml.nvmlDeviceGetCount()
            all_handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            uuids = [_text(pynvml.nvmlDeviceGetUUID(h)) for h in all_handles]
        except Exception as exc:
            _safe_shutdown(pynvml)
            raise _map_error(exc, "device enumeration") from exc
        if visible_devices is None:
            visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        entries = parse_visible_devices(visible_devices)
        physical: list[int] = []
        if entries is None:
            physical = list(range(count))
        else:
            for entry in entries:
                match = _match_visible(entry, uuids)
                if match is None or match in physical:
                    break  # CUDA hides everything from the first invalid or repeated entry
                physical.append(match)
        return cls(pynvml, [all_handles[i] for i in physical], physical)

    def device_count(self) -> int:
        return len(self._handles)

    def device_info(self, index: int) -> DeviceInfo:
        cached = self._info.get(index)
        if cached is not None:
            return cached
        nvml, handle = self._nvml, self._handle(index)
        name = _text(self._call("nvmlDeviceGetName", handle))
        uuid = _text(self._call("nvmlDeviceGetUUID", handle))
        architecture = _optional(
            lambda: _NVML_ARCHITECTURES.get(int(nvml.nvmlDeviceGetArchitecture(handle)))
        )
        capability = _optional(lambda: tuple(nvml.nvmlDeviceGetCudaComputeCapability(handle)))
        memory = _optional(lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total))
        limit_mw = _optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        info = DeviceInfo(
            index=index,
            name=name,
            uuid=uuid,
            architecture=architecture,
            compute_capability=capability,  # type: ignore[arg-type]
            memory_total_bytes=memory,
            power_limit_w=None if limit_mw is None else float(limit_mw) / 1000.0,
        )
        self._info[index] = info
        return info

    def energy_j(self, index: int) -> float | None:
        if index in self._no_counter:
            return None
        try:
            millijoules = self._call("nvmlDeviceGetTotalEnergyConsumption", self._handle(index))
        except NotSupportedError:
            self._no_counter.add(index)  # pre-Volta or virtualised: never ask again
            return None
        return float(millijoules) / 1000.0

    def power_w(self, index: int) -> float:
        handle = self._handle(index)
        if index not in self._no_instant:
            try:
                values = self._call(
                    "nvmlDeviceGetFieldValues", handle, [_NVML_FI_DEV_POWER_INSTANT]
                )
                field = values[0]
                code = int(field.nvmlReturn)
                if code == 0:
                    return _field_number(field) / 1000.0
                if code in _LOST_CODES:
                    raise DeviceLostError(f"GPU {index} lost (field 186)")
                if code in _UNSUPPORTED_CODES:
                    self._no_instant.add(index)
                # Any other code is a failure of this one read: fall back for it alone, not for
                # the rest of the process.
            except NotSupportedError:
                self._no_instant.add(index)
        # Last resort: the driver's (often 1 s averaged) power reading.
        return float(self._call("nvmlDeviceGetPowerUsage", handle)) / 1000.0

    def power_method(self, index: int) -> str:
        return "power_usage" if index in self._no_instant else "instant_power"

    def physical_index(self, index: int) -> int:
        return self._physical[index]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _safe_shutdown(self._nvml)

    def _handle(self, index: int) -> Any:
        if not 0 <= index < len(self._handles):
            raise BackendError(f"no visible GPU {index} (visible: {len(self._handles)})")
        return self._handles[index]

    def _call(self, function: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, function)(*args)
        except Exception as exc:
            raise _map_error(exc, function) from exc


def _match_visible(entry: str, uuids: list[str]) -> int | None:
    if entry.isdigit():
        index = int(entry)
        return index if index < len(uuids) else None
    matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
    return matches[0] if len(matches) == 1 else None


def _map_error(exc: BaseException, where: str) -> BackendError:
    """An NVML exception as one of ecoguard's backend errors."""
    if isinstance(exc, BackendError):
        return exc
    code = getattr(exc, "value", None)
    message = f"NVML {where}: {exc}"
    if code in _UNSUPPORTED_CODES:
        return NotSupportedError(message)
    if code in _LOST_CODES:
        return DeviceLostError(message)
    return BackendError(message)


def _safe_shutdown(pynvml: Any) -> None:
    try:
        pynvml.nvmlShutdown()
    except Exception as exc:  # shutting down a broken driver must not raise
        _log.debug("nvmlShutdown failed: %r", exc)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _optional(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:
        return None


# nvmlValueType_t -> the member of the nvmlValue_t union that holds the value.
_FIELD_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_number(field: Any) -> float:
    kind = int(field.valueType)
    member = _FIELD_VALUE_MEMBERS[kind] if 0 <= kind < len(_FIELD_VALUE_MEMBERS) else "uiVal"
    return float(getattr(field.value, member))


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
        from ecoguard.knowledge import find_rows, resolve_gpu

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
    from ecoguard.knowledge import find_rows, resolve_gpu

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


def choose_backend(settings: Any, *, clock: Clock = time.monotonic) -> PowerBackend:
    """The backend ``settings.backend`` names; ``auto``: NVML when it initialises, else null.

    An explicit ``nvml`` that cannot start raises BackendError (the user asked for it); ``auto``
    falls back quietly, logging why at debug level."""
    choice = getattr(settings, "backend", "auto")
    if choice == "null":
        return NullBackend()
    if choice == "simulated":
        return SimulatedBackend.from_settings(settings, clock=clock)
    if choice == "nvml":
        return NvmlBackend.probe()
    try:
        return NvmlBackend.probe()
    except BackendError as exc:
        _log.debug("NVML unavailable, metering with the null backend: %s", exc)
        return NullBackend()
