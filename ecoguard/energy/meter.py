"""The meter: per-call energy windows, records, cost and CO2.

``meter.begin(devices=..., info=CallInfo(...))`` before a generate call and
``meter.end(window, tokens=..., requests=...)`` after it. ``end`` returns one frozen
:class:`GenerationRecord` and publishes it on ``ecoguard.events.records``. The energy of a call is
its time-overlap share of each GPU it ran on (see :mod:`ecoguard.energy.attribution`), read at the
call's edges on the caller's thread (a few microseconds of NVML calls) so short calls are exact,
not rounded to the sampler's 100 ms grid.

Cost and CO2: ``kWh x PUE x price`` and ``kWh x PUE x grid intensity`` from the region table
(:func:`ecoguard.knowledge.region`) with the Settings overrides on top. The reference J/token for
the same configuration comes from :func:`ecoguard.knowledge.estimator.estimate`, cached per
configuration.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ecoguard import events
from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.energy import fork
from ecoguard.energy.attribution import GpuTrack, Reading
from ecoguard.energy.backends import DeviceInfo, PowerBackend, choose_backend
from ecoguard.energy.reference import ReferenceCache
from ecoguard.energy.sampler import Sampler
from ecoguard.errors import UsageError
from ecoguard.faults import fault_counts, record_fault
from ecoguard.forking import register_fork_hooks
from ecoguard.knowledge import region, resolve_gpu

_log = logging.getLogger("ecoguard.energy")

JOULES_PER_KWH = 3.6e6

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class CallInfo:
    """What the guard knows about one generate call when it starts.

    ``deployment``, when given, is the model's configuration for the reference J/token; this
    call's ``batch_size`` and ``prompt_tokens``, where set, override its own, so a caller passes
    the one deployment object of its model rather than a copy per call."""

    model_name: str | None = None
    precision: str | None = None
    batch_size: int | None = None
    prompt_tokens: int | None = None
    max_new_tokens: int | None = None
    deployment: Deployment | None = None
    label: str | None = None


@dataclass(frozen=True, slots=True)
class GenerationRecord:
    """One measured generate call. Energies in J, times in s, cost in USD, CO2 in grams.

    ``energy_j`` is the call's share of its GPUs' energy, idle power included (``idle_power_w`` says
    how much of the draw was idle). ``tier`` is ``live`` (a real driver) or ``simulated``.
    ``reference_j_per_token`` is what the reference data expects for the same configuration, with
    its own tier (``measured``, ``derived``... or ``none``). ``batching_saved_j``: for a call that
    ecoguard's batching coalesced (``batch_size`` above its own ``requests``), the energy running
    its requests alone would have cost more (tier ``derived``, from the batch sweep); else None."""

    start_monotonic: float
    end_monotonic: float
    timestamp: float  # epoch seconds at the end of the call
    duration_s: float
    energy_j: float
    tokens: int
    requests: int
    batch_size: int | None
    prompt_tokens: int | None
    model_name: str | None
    precision: str | None
    gpu_names: tuple[str, ...]
    gpu_indices: tuple[int, ...]
    tier: str
    cost_usd: float | None
    co2_g: float | None
    joules_per_token: float | None
    reference_j_per_token: float | None
    reference_tier: str
    label: str | None = None
    gpu_uuids: tuple[str, ...] = ()
    method: str = ""
    idle_power_w: float | None = None
    complete: bool = True  # False when a GPU stopped answering during the call
    error: str | None = None  # the exception type, when the call raised
    batching_saved_j: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class GpuState:
    """A snapshot of one GPU as the meter sees it (for metrics and ``doctor``)."""

    index: int
    uuid: str
    name: str
    profile: str | None
    energy_j_total: float
    power_w: float | None
    idle_w: float | None
    stale: bool
    tier: str
    method: str
    faults: int
    open_calls: int = 0


@dataclass(slots=True)
class CallWindow:
    """An open call. Returned by :meth:`Meter.begin`; pass it to :meth:`Meter.end`."""

    key: int
    devices: tuple[int, ...]
    info: CallInfo
    start_monotonic: float
    start_wall: float
    closed: bool = False
    started_on: tuple[int, ...] = field(default_factory=tuple)
    # Each GPU's method when the call opened (a coarse start edge taints the whole call).
    start_methods: tuple[str, ...] = field(default_factory=tuple)
    # False when a GPU could not be read at the call's start: its energy is then a lower bound.
    complete: bool = True


# Measurement collectors of the current context (see ecoguard.energy.measure).
_collectors: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar(
    "ecoguard_measure_collectors", default=()
)

# Methods whose figure for a short call is coarse: a call that opened under one keeps its name
# even if the GPU's method improved (a calibration finished) before the call ended.
COARSE_METHODS = frozenset({"counter_uncalibrated", "averaged_power_integration", "unknown"})


def _call_method(start: str | None, end: str) -> str:
    return start if start in COARSE_METHODS else end


def _measure_label() -> str | None:
    """The label of the innermost ``ecoguard.measure("label")`` block around this call."""
    for collector in reversed(_collectors.get()):
        label = getattr(collector, "label", None)
        if label:
            return str(label)
    return None


class _Pricing:
    """Price, grid intensity and PUE resolved once per meter (region table + overrides)."""

    def __init__(self, settings: Settings) -> None:
        price, gco2, pue = settings.price_usd_per_kwh, settings.grid_gco2_per_kwh, settings.pue
        if price is None or gco2 is None or pue is None:
            try:
                grid = region(settings.region)
                price = grid.price_usd_per_kwh if price is None else price
                gco2 = grid.gco2_per_kwh if gco2 is None else gco2
                pue = grid.pue if pue is None else pue
            except Exception as exc:
                record_fault("meter.pricing", exc)
        self.price_usd_per_kwh = price
        self.gco2_per_kwh = gco2
        self.pue = 1.0 if pue is None else pue

    def cost_usd(self, energy_j: float) -> float | None:
        if self.price_usd_per_kwh is None:
            return None
        return energy_j / JOULES_PER_KWH * self.pue * self.price_usd_per_kwh

    def co2_g(self, energy_j: float) -> float | None:
        if self.gco2_per_kwh is None:
            return None
        return energy_j / JOULES_PER_KWH * self.pue * self.gco2_per_kwh


class Meter:
    """Tracks the backend's GPUs, runs the sampler, turns call windows into records."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        backend: PowerBackend | None = None,
        clock: Clock | None = None,
        wall_clock: Clock = time.time,
        calibrate: bool = True,
        default_devices: tuple[int, ...] = (0,),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings if settings is not None else Settings()
        self.clock = clock if clock is not None else time.monotonic
        self.backend = (
            backend if backend is not None else choose_backend(self.settings, clock=self.clock)
        )
        # A simulated GPU with a work model keeps its own clock (calls take modelled GPU time,
        # not this machine's): its readings, and so every call window, are timed on it, so the
        # figures do not follow CPU load. The sampler's own schedule and health stay on ours.
        track_clock = getattr(self.backend, "gpu_clock", None) or self.clock
        self.tier = self.backend.tier
        self._simulate_call = getattr(self.backend, "simulate_call", None)  # (once, not per call)
        self._wall_clock = wall_clock
        self.tracks: list[GpuTrack] = []
        for index in range(self.backend.device_count()):
            try:
                info = self.backend.device_info(index)
            except Exception as exc:
                # One GPU that does not answer (lost, reset) must not cost the others their
                # measurement: keep its place (indices are CUDA indices) with a placeholder; its
                # reads fail, the sampler marks it stale and keeps retrying.
                record_fault("meter.device_info", exc)
                info = DeviceInfo(index=index, name=f"GPU {index} (unavailable)", uuid="")
            profile = getattr(self.backend, "profile_key", None) or _profile_key(info.name)
            self.tracks.append(GpuTrack(self.backend, info, clock=track_clock, profile_key=profile))
        self.default_devices = tuple(d for d in default_devices if d < len(self.tracks))
        self.sampler = Sampler(
            self.tracks,
            hz=self.settings.sample_hz,
            clock=self.clock,
            calibrate=calibrate,
            sleep=sleep,
        )
        self.pricing = _Pricing(self.settings)
        self._keys = itertools.count(1)
        self._reference_cache = ReferenceCache(self.settings)
        # Devices -> their names, indices and UUIDs (fixed once the meter is built).
        self._gpu_names: dict[tuple[int, ...], tuple[tuple[Any, ...], ...]] = {}
        self.records_published = 0
        self._started = False

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> Meter:
        if not self._started:
            self._started = True
            self.sampler.start()
            fork.watch(self)  # quiesced before a fork, re-armed in the child
        return self

    def rearm_in_child(self) -> None:
        """In a forked child: fresh locks, no calls left open by parent threads, and the sampler
        thread again (without the first calibration: the parent's phase model holds)."""
        rearm_backend = getattr(self.backend, "rearm_in_child", None)
        if rearm_backend is not None:
            rearm_backend()
        for track in self.tracks:
            track.rearm_in_child()
        self._reference_cache.rearm_in_child()
        self.records_published = 0
        self.sampler.rearm_in_child()

    def stop(self) -> None:
        fork.unwatch(self)
        self.sampler.stop()
        try:
            self.backend.close()
        except Exception as exc:
            record_fault("meter.close", exc)

    def wait_ready(self, timeout: float | None = 5.0) -> bool:
        """Wait until the sampler's first calibration pass is done (for tests and benchmarks)."""
        return self.sampler.ready.wait(timeout)

    # ----------------------------------------------------------------- calls

    def begin(self, *, devices: tuple[int, ...] | None = None, info: CallInfo) -> CallWindow:
        """Open a window on ``devices`` (visible indices; None: the meter's default GPUs)."""
        chosen = self._devices(devices)
        window = CallWindow(
            key=next(self._keys),
            devices=chosen,
            info=info,
            start_monotonic=self.clock(),
            start_wall=self._wall_clock(),
        )
        started: list[int] = []
        methods: list[str] = []
        first: Reading | None = None
        for index in chosen:
            reading = self.tracks[index].open(window.key)
            started.append(index)
            methods.append(self.tracks[index].method)
            if reading is None:
                window.complete = False
            elif first is None:
                first = reading
        window.started_on = tuple(started)
        window.start_methods = tuple(methods)
        if first is not None:
            window.start_monotonic = first.t
        return window

    def end(
        self,
        window: CallWindow,
        *,
        tokens: int,
        requests: int,
        error: BaseException | None = None,
        batch_size: int | None = None,
    ) -> GenerationRecord | None:
        """Close ``window``; returns its record (None with no GPU, or if already closed).

        ``batch_size``: the batch the GPU actually ran when it differs from the one the call
        was opened with (a call coalesced with others by ecoguard's batching)."""
        if window.closed:
            return None
        window.closed = True
        energy_j = 0.0
        end_t: float | None = None
        complete = window.complete
        simulate_call = self._simulate_call
        if simulate_call is not None:  # a simulated GPU runs the call's modelled work now
            batch = batch_size or window.info.batch_size or 1
            for index in window.started_on:
                simulate_call(index, tokens=max(0, int(tokens)), batch_size=batch)
        for index in window.started_on:
            track = self.tracks[index]
            share, reading = track.close(window.key)
            energy_j += share
            if reading is None:
                complete = False
            elif end_t is None or reading.t > end_t:
                end_t = reading.t
        if not window.started_on:
            return None
        end_monotonic = end_t if end_t is not None else self.clock()
        record = self._record(
            window, energy_j, end_monotonic, tokens, requests, error, complete, batch_size
        )
        for collector in _collectors.get():
            collector._add_record(record)
        self.records_published += 1
        events.records.publish(record)
        return record

    def _devices(self, devices: tuple[int, ...] | None) -> tuple[int, ...]:
        if devices is None:
            return self.default_devices
        valid = tuple(dict.fromkeys(d for d in devices if 0 <= d < len(self.tracks)))
        if len(valid) != len(tuple(devices)):
            record_fault("meter.devices", ValueError(f"devices {devices} not all visible"))
        return valid

    def _record(
        self,
        window: CallWindow,
        energy_j: float,
        end_monotonic: float,
        tokens: int,
        requests: int,
        error: BaseException | None,
        complete: bool,
        batch_size: int | None = None,
    ) -> GenerationRecord:
        info = window.info
        started = window.started_on
        tracks = [self.tracks[i] for i in started]
        idle_power_w = None
        methods = set()
        for track, start_method in zip(tracks, window.start_methods, strict=False):
            methods.add(_call_method(start_method, track.method))
            idle_w = track.idle_w
            if idle_w is not None:
                idle_power_w = idle_w if idle_power_w is None else idle_power_w + idle_w
        names = self._gpu_names.get(started)
        if names is None:
            names = self._gpu_names[started] = (
                tuple(t.info.name for t in tracks),
                tuple(t.index for t in tracks),
                tuple(t.info.uuid for t in tracks),
            )
        tokens = max(0, int(tokens))
        requests = max(0, int(requests))
        batch_size = batch_size or info.batch_size
        reference, reference_tier = self._reference_cache.lookup(info, started, tracks)
        return GenerationRecord(
            start_monotonic=window.start_monotonic,
            end_monotonic=end_monotonic,
            timestamp=window.start_wall + (end_monotonic - window.start_monotonic),
            duration_s=max(0.0, end_monotonic - window.start_monotonic),
            energy_j=energy_j,
            tokens=tokens,
            requests=requests,
            batch_size=batch_size,
            prompt_tokens=info.prompt_tokens,
            model_name=info.model_name,
            precision=info.precision,
            gpu_names=names[0],
            gpu_indices=names[1],
            tier=self.tier,
            cost_usd=self.pricing.cost_usd(energy_j),
            co2_g=self.pricing.co2_g(energy_j),
            joules_per_token=energy_j / tokens if tokens else None,
            reference_j_per_token=reference,
            reference_tier=reference_tier,
            label=info.label if info.label is not None else _measure_label(),
            gpu_uuids=names[2],
            method="+".join(sorted(methods)),
            idle_power_w=idle_power_w,
            complete=complete,
            error=type(error).__name__ if error is not None else None,
            batching_saved_j=self._reference_cache.batching_saved_j(energy_j, requests, batch_size),
        )

    # ----------------------------------------------------------------- reading

    def read_energy(self, devices: tuple[int, ...] | None = None) -> dict[int, float]:
        """Estimated cumulative energy (J) of ``devices`` now, unshared (for ``measure``)."""
        result: dict[int, float] = {}
        for index in self._devices(devices) if devices is not None else range(len(self.tracks)):
            reading = self.tracks[index].try_read()
            if reading is not None:
                result[index] = reading.energy_j
        return result

    def gpu_states(self) -> list[GpuState]:
        states = []
        for track in self.tracks:
            last = track.last
            states.append(
                GpuState(
                    index=track.index,
                    uuid=track.info.uuid,
                    name=track.info.name,
                    profile=track.profile_key,
                    energy_j_total=track.energy_total_j,
                    power_w=last.power_w if last is not None else None,
                    idle_w=track.idle_w,
                    stale=track.stale,
                    tier=self.tier,
                    method=track.method,
                    faults=track.faults,
                    open_calls=track.open_calls,
                )
            )
        return states

    def stats(self) -> dict[str, Any]:
        faults = {k: v for k, v in fault_counts().items() if k.startswith("meter.")}
        return {
            "backend": self.backend.name,
            "tier": self.tier,
            "gpus": len(self.tracks),
            "samples": self.sampler.samples,
            "sample_hz": self.sampler.hz,
            "sample_hz_actual": self.sampler.actual_hz(),
            "sampler_cpu_fraction": self.sampler.cpu_fraction(),
            "last_sample_monotonic": self.sampler.last_sample_monotonic,
            "running": self.sampler.running,
            "records": self.records_published,
            "faults": faults,
            "counter_period_s": [t.phase.period_s for t in self.tracks],
        }


def _profile_key(gpu_name: str) -> str | None:
    try:
        return resolve_gpu(gpu_name).key
    except UsageError:  # a GPU the table does not know
        return None
    except Exception as exc:  # tables unreadable
        record_fault("meter.profile", exc)
        return None


# ----------------------------------------------------------------- the process-wide meter


class MeterSlot:
    """Where a running meter is held for the guard's per-call path.

    ``meter`` is the meter (None when none runs); ``measurable`` is the same meter when it has a
    GPU to read, else None. The guard reads ``measurable`` on every generate call: one attribute
    read, where a call into this module costs microseconds of CPU on a real call, whose
    milliseconds of model work leave the guard's code and data out of the CPU's caches
    (benchmarks/RESULTS.md, "guard cost on real models")."""

    __slots__ = ("measurable", "meter")

    def __init__(self, meter: Meter | None = None) -> None:
        self.meter: Meter | None = None
        self.measurable: Meter | None = None
        self.hold(meter)

    def hold(self, meter: Meter | None) -> None:
        # ``measurable`` is cleared first and set last: a reader between the writes sees no meter
        # to measure with, never the one being replaced beside the new one.
        self.measurable = None
        self.meter = meter
        self.measurable = meter if meter is not None and can_measure(meter) else None


def can_measure(meter: Any) -> bool:
    """False for a meter with no GPU to read (no backend): a window on it would measure nothing
    and publish no record. A meter's tracks are fixed when it is built."""
    tracks = getattr(meter, "tracks", None)
    return tracks is None or len(tracks) > 0


# The process-wide meter (started by install() through the composition root, or by measure()).
PROCESS_METER = MeterSlot()
_meter_lock = threading.Lock()


def _fresh_process_lock() -> None:
    """In a forked child: the process-wide meter's lock anew (a parent thread may have held it
    in start_meter at the fork, and no thread of the child would ever release it)."""
    global _meter_lock
    _meter_lock = threading.Lock()


def start_meter(
    settings: Settings | None = None,
    *,
    backend: PowerBackend | None = None,
    clock: Clock | None = None,
) -> Meter:
    """Start the process-wide meter (idempotent: a second call returns the running one).

    The meter only: the ledger its records go to, and the metrics server, are started beside it
    by the composition root (:func:`ecoguard.services.start_services`, used by ``install()``)."""
    register_fork_hooks("meter.process", after_in_child=_fresh_process_lock)
    with _meter_lock:
        meter = PROCESS_METER.meter
        if meter is None:
            settings = settings if settings is not None else Settings.from_env()
            meter = Meter(settings, backend=backend, clock=clock).start()
            PROCESS_METER.hold(meter)
        return meter


def get_meter() -> Meter | None:
    return PROCESS_METER.meter


def stop_meter() -> None:
    """Stop the process-wide meter and release the backend. Idempotent."""
    with _meter_lock:
        meter = PROCESS_METER.meter
        PROCESS_METER.hold(None)
    if meter is not None:
        meter.stop()
