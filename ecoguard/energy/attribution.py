"""Per-GPU energy tracking: edge-corrected counter readings and sharing among open calls.

Why edge correction. NVML's total-energy counter changes only at update instants about 100 ms
apart, and a read returns the energy at the *last* update. Reading it at the start and end of a
call (what Zeus does) is off by up to one update period of power at each edge: a 50 ms call can
read zero, or a whole 100 ms step. Here every read estimates the true cumulative energy at the
moment of the read:

    E(t) ~= counter + P(t) * (t - u(t))

where ``u(t)`` is the counter's last update instant, predicted from its measured update period and
phase (:class:`CounterPhase`, calibrated by polling the counter briefly and checked on every read),
and ``P(t)`` the instant power (field 186). Without a counter, E(t) is the trapezoidal integral of
instant power between reads.

Why sharing by time. Calls that overlap on one GPU cannot be told apart by the hardware. Each
begin/end is an event; between two consecutive events the set of open calls is fixed, and the
energy of that interval is split equally among them. Over a call's life that is exactly a
time-overlap weighting, and the shares of all calls add up to the GPU's energy while any call was
open (tested). Idle power is not subtracted; it is tracked separately from reads taken while no
call is open.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ecoguard.energy.backends import DeviceInfo, PowerBackend
from ecoguard.errors import DeviceLostError, NotSupportedError
from ecoguard.faults import record_fault

Clock = Callable[[], float]

# Readings above this multiple of the power limit are treated as garbage, not physics.
ABSURD_POWER_FACTOR = 3.0
# Without a known power limit, anything above this is garbage (no single GPU draws 5 kW).
ABSURD_POWER_CEILING_W = 5000.0
# Calibration: poll the counter this often, for at most this long, until this many changes.
CALIBRATION_POLL_S = 0.0005
CALIBRATION_MAX_S = 0.6
CALIBRATION_CHANGES = 5
REFINE_UPDATES = 6
REFINE_SLOT_S = 0.006
# Counters that change faster than this are treated as continuous (no edge correction needed).
CONTINUOUS_PERIOD_S = 0.003
RECALIBRATE_AFTER_S = (2.0, 10.0, 60.0)
SLOW_READ_S = 0.001
PHASE_TOLERANCE_S = 0.0015
MAX_FIT_RESIDUAL_S = 0.0015
# A counter unchanged this long (or 5 update periods) while power says this much energy was drawn
# is stuck, not idle.
FROZEN_AFTER_S = 1.0
FROZEN_MIN_J = 5.0
SAMPLE_RING = 3000  # bounded history per GPU: 5 min at 10 Hz
IDLE_RING = 600


@dataclass(frozen=True, slots=True)
class Reading:
    """One read of one GPU. ``energy_j`` is the estimated cumulative energy at ``t`` (monotonic s)
    since the meter started tracking it; ``power_w`` the instant power."""

    t: float
    energy_j: float
    power_w: float
    counter_j: float | None


class CounterPhase:
    """When a quantised energy counter last updated, predicted from its period and phase."""

    def __init__(self) -> None:
        self.period_s: float | None = None  # None: not calibrated; 0.0: continuous counter
        self.anchor_s = 0.0  # one update instant (monotonic s)
        self.calibrated_at: float | None = None
        self.calibrations = 0

    def next_calibration_due(self) -> float:
        """When to recalibrate: soon after the first fits (each longer baseline pins the period
        more precisely: the first 2 s baseline cuts a 0.3 ms phase error to ~15 us per period),
        then every minute."""
        if self.calibrated_at is None:
            return 0.0
        return (
            self.calibrated_at
            + RECALIBRATE_AFTER_S[min(self.calibrations, len(RECALIBRATE_AFTER_S)) - 1]
        )

    @property
    def calibrated(self) -> bool:
        return self.period_s is not None

    def last_update(self, t: float) -> float | None:
        """The predicted last update instant at or before ``t``; None when uncalibrated."""
        if self.period_s is None:
            return None
        if self.period_s == 0.0:
            return t
        cycles = math.floor((t - self.anchor_s) / self.period_s)
        return self.anchor_s + cycles * self.period_s

    def updates_between(self, t0: float, t1: float) -> int:
        """How many predicted updates fall in (t0, t1]."""
        if not self.period_s:
            return 0
        return math.floor((t1 - self.anchor_s) / self.period_s) - math.floor(
            (t0 - self.anchor_s) / self.period_s
        )

    def near_update(self, t: float, tolerance_s: float) -> bool:
        last = self.last_update(t)
        if last is None or not self.period_s:
            return False
        return t - last < tolerance_s or last + self.period_s - t < tolerance_s

    def fit(
        self, change_times: list[float], now: float, *, period_hint: float | None = None
    ) -> bool:
        """Fit period and phase to observed change instants. Returns False if they make no sense
        (then the previous fit, if any, stays). ``period_hint`` numbers the cycles between changes
        that are several updates apart."""
        if len(change_times) < 3:
            return False
        diffs = [b - a for a, b in itertools.pairwise(change_times)]
        # Polls can miss a change (a preempted poll is discarded) but never invent one, so gaps
        # are whole multiples of the period: the smallest gap is the period, not the median.
        rough = period_hint if period_hint else min(diffs)
        if rough < CONTINUOUS_PERIOD_S:
            self.period_s, self.anchor_s, self.calibrated_at = 0.0, change_times[-1], now
            self.calibrations += 1
            return True
        cycles = [round((c - change_times[0]) / rough) for c in change_times]
        if len(set(cycles)) != len(cycles):
            return False
        # Least squares of change time against cycle number: slope = period, intercept = phase.
        mean_n = statistics.fmean(cycles)
        mean_c = statistics.fmean(change_times)
        var_n = sum((n - mean_n) ** 2 for n in cycles)
        period = (
            sum((n - mean_n) * (c - mean_c) for n, c in zip(cycles, change_times, strict=True))
            / var_n
        )
        anchor = mean_c - period * mean_n
        worst_residual = max(
            abs(c - (anchor + period * n)) for n, c in zip(cycles, change_times, strict=True)
        )
        if worst_residual > MAX_FIT_RESIDUAL_S:
            return False  # the instants do not sit on one regular grid: keep the previous fit
        if self.period_s and self.calibrated_at is not None:
            # A long baseline between two calibrations pins the period far more precisely.
            span = anchor - self.anchor_s
            n_between = round(span / period)
            if n_between > 0 and abs(span / n_between - period) < 0.05 * period:
                period = span / n_between
        self.period_s, self.anchor_s, self.calibrated_at = period, anchor, now
        self.calibrations += 1
        return True


class GpuTrack:
    """Everything the meter knows about one GPU: readings, counter phase, open calls, idle power.

    All mutation happens under ``lock``; reads from the sampler thread and the begin/end edges of
    calls are serialised, so the estimated energy is monotonic in time order."""

    def __init__(
        self,
        backend: PowerBackend,
        info: DeviceInfo,
        *,
        clock: Clock = time.monotonic,
        profile_key: str | None = None,
    ) -> None:
        self.backend = backend
        # Found once: a missing attribute costs a raised and caught AttributeError per lookup,
        # and this is asked at both edges of every call.
        self._set_active = getattr(backend, "set_active", None)
        self.info = info
        self.index = info.index
        self.profile_key = profile_key
        self.clock = clock
        self.lock = threading.RLock()
        self.phase = CounterPhase()
        self.has_counter: bool | None = None
        self.needs_calibration = backend.counter_quantised
        self.samples: deque[Reading] = deque(maxlen=SAMPLE_RING)
        self._idle_powers: deque[float] = deque(maxlen=IDLE_RING)
        # The same powers kept sorted, and their median: updated per idle read (a bisect), so a
        # call's record reads ``idle_w`` as one attribute instead of sorting 600 floats.
        self._idle_sorted: list[float] = []
        self._idle_median_w: float | None = None
        self.stale = False
        self.retry_at = 0.0
        self.backoff_s = 0.0
        self.faults = 0
        self.reads = 0
        self.resets = 0
        self._offset_j = 0.0  # added to the raw counter: start offset and counter resets
        self._last_raw_j: float | None = None
        self._last_raw_t = 0.0
        # The current raw counter value first appeared in (_raw_lower_t, _raw_first_seen_t]:
        # its update instant lies there, which disambiguates predictions near an update.
        self._raw_lower_t = -math.inf
        self._raw_first_seen_t = 0.0
        # Running trapezoid of instant power (J): bridges resets, jumps and a frozen counter.
        self._power_integral_j = 0.0
        self._first_seen_integral_j = 0.0
        self._frozen = False
        self._last: Reading | None = None
        self._first_energy_j: float | None = None
        # Attribution state: open windows -> accumulated share (J), and the last event.
        self._open: dict[int, float] = {}
        self._event_energy_j: float | None = None
        limit = info.power_limit_w
        self._max_power_w = ABSURD_POWER_FACTOR * limit if limit else ABSURD_POWER_CEILING_W

    # ----------------------------------------------------------------- reading

    @property
    def method(self) -> str:
        """How this GPU's energy is measured now (see docs/meter.md, "Methods"):

        ``counter_edge_corrected`` (quantised counter, edges corrected), ``counter`` (a counter
        that needs no correction), ``counter_uncalibrated`` (quantised counter before its first
        calibration: calls shorter than one update can read 0 J), ``power_integration`` (no
        counter: instant power integrated), ``averaged_power_integration`` (no counter and no
        instant power: the driver's ~1 s average integrated, coarse on short calls),
        ``unknown`` (not read yet)."""
        if self.has_counter is False:
            if self._averaged_power_only():
                return "averaged_power_integration"
            return "power_integration"
        if self.has_counter and not self.backend.counter_quantised:
            return "counter"
        if self.has_counter:
            return "counter_edge_corrected" if self.phase.calibrated else "counter_uncalibrated"
        return "unknown"

    def _averaged_power_only(self) -> bool:
        power_method = getattr(self.backend, "power_method", None)
        if power_method is None:
            return False
        try:
            return power_method(self.index) == "power_usage"
        except Exception as exc:
            record_fault("meter.power_method", exc)
            return False

    def read(self) -> Reading:
        """Read the device now and update the estimate. Raises BackendError subclasses."""
        with self.lock:
            for _attempt in range(3):
                t_before = self.clock()
                raw_j = self.backend.energy_j(self.index)
                t_after = self.clock()
                # A read that took long (the thread was descheduled mid-call) has an uncertain
                # time stamp, and a wrong time stamp is a wrong edge: read again.
                if t_after - t_before <= SLOW_READ_S:
                    break
            t = (t_before + t_after) / 2.0
            power_w = self.backend.power_w(self.index)
            self.reads += 1
            last = self._last
            if not (math.isfinite(power_w) and 0.0 <= power_w <= self._max_power_w):
                self.faults += 1
                record_fault("meter.absurd_power", ValueError(f"GPU {self.index}: {power_w} W"))
                power_w = last.power_w if last is not None else 0.0
            if last is not None:
                self._power_integral_j += 0.5 * (last.power_w + power_w) * max(0.0, t - last.t)
            if raw_j is None:
                self.has_counter = False
                energy_j = self._integrate(last, t, power_w)
            else:
                self.has_counter = True
                energy_j = self._from_counter(last, t, raw_j, power_w)
            if last is not None and energy_j < last.energy_j:
                energy_j = last.energy_j  # edge-estimate noise must never make energy run back
            reading = Reading(t=t, energy_j=energy_j, power_w=power_w, counter_j=raw_j)
            self._last = reading
            if self._first_energy_j is None:
                self._first_energy_j = energy_j
            self.samples.append(reading)
            if not self._open:
                self._note_idle(power_w)
            if self.stale:
                self.stale = False
                self.backoff_s = 0.0
            return reading

    def _note_idle(self, power_w: float) -> None:
        """Keep an idle read's power (under ``lock``) and the median of the last IDLE_RING."""
        powers, ordered = self._idle_powers, self._idle_sorted
        if len(powers) == powers.maxlen:
            del ordered[bisect.bisect_left(ordered, powers[0])]
        powers.append(power_w)
        bisect.insort(ordered, power_w)
        count = len(ordered)
        if count < 3:
            return
        middle = count // 2
        # statistics.median's own arithmetic, so the figure is the same to the last bit.
        self._idle_median_w = (
            ordered[middle] if count % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        )

    def _integrate(self, last: Reading | None, t: float, power_w: float) -> float:
        if last is None:
            return 0.0
        return last.energy_j + 0.5 * (last.power_w + power_w) * max(0.0, t - last.t)

    def _from_counter(self, last: Reading | None, t: float, raw_j: float, power_w: float) -> float:
        previous_raw = self._last_raw_j
        if previous_raw is None:
            self._offset_j = -raw_j  # energies are reported from the first read on
        elif raw_j < previous_raw - 1e-3:
            # Counter reset or wrap: carry the estimate on from the last read by power.
            self.resets += 1
            self.faults += 1
            record_fault(
                "meter.counter_reset", ValueError(f"GPU {self.index}: {raw_j} < {previous_raw}")
            )
            return self._bridge(last, t, raw_j, power_w)
        elif (
            raw_j - previous_raw
            > self._max_power_w * (t - self._last_raw_t + max(self.phase.period_s or 0.0, 0.2))
            + 1.0
        ):
            # A leap no GPU could draw (above the absurd-power bound over the elapsed time plus
            # one update): garbage, not energy. Bridge it with the power integral.
            self.faults += 1
            record_fault(
                "meter.counter_jump",
                ValueError(f"GPU {self.index}: counter +{raw_j - previous_raw} J"),
            )
            return self._bridge(last, t, raw_j, power_w)
        if self._frozen:
            if raw_j == previous_raw:
                return self._offset_j + raw_j + self._power_integral_j - self._first_seen_integral_j
            # Moving again: keep the estimate continuous (the counter's catch-up, if any, was
            # already counted from power).
            self._offset_j += self._power_integral_j - self._first_seen_integral_j
            self._offset_j += previous_raw - raw_j
            self._frozen = False
        elif raw_j == previous_raw and previous_raw is not None:
            frozen_after = max(5.0 * (self.phase.period_s or 0.0), FROZEN_AFTER_S)
            drawn_j = self._power_integral_j - self._first_seen_integral_j
            if t - self._raw_first_seen_t > frozen_after and drawn_j > FROZEN_MIN_J:
                # A stuck counter while the GPU draws power: a stuck driver, not an idle GPU.
                # Count from power until the counter moves again.
                self._frozen = True
                self.faults += 1
                record_fault(
                    "meter.counter_frozen",
                    ValueError(
                        f"GPU {self.index}: counter stuck at {raw_j} J, {drawn_j:.1f} J drawn"
                    ),
                )
                return self._offset_j + raw_j + drawn_j
        if (
            previous_raw is not None
            and raw_j != previous_raw  # (first: most reads at a call's edges see no change)
            and self.backend.counter_quantised
            and self.phase.period_s
            and not self.phase.near_update(t, 0.002)
            and not self.phase.near_update(self._last_raw_t, 0.002)
            and self.phase.updates_between(self._last_raw_t, t) <= 0
        ):
            self.needs_calibration = True  # changed, none predicted: the phase drifted
        if previous_raw is None or raw_j != previous_raw:
            self._raw_lower_t = self._last_raw_t if previous_raw is not None else -math.inf
            self._raw_first_seen_t = t
            self._first_seen_integral_j = self._power_integral_j
        self._last_raw_j, self._last_raw_t = raw_j, t
        lag_s = 0.0
        period = self.phase.period_s
        if self.backend.counter_quantised and period:
            update = self.phase.last_update(t)
            assert update is not None
            lower, upper = self._raw_lower_t, self._raw_first_seen_t
            # Time stamps carry ~0.5 ms of noise: a prediction just outside the interval is the
            # right update seen through that noise (clamp); far outside, it is a neighbour.
            if update > upper + PHASE_TOLERANCE_S:  # predicted an update not seen happen yet
                update -= period * math.ceil((update - upper - PHASE_TOLERANCE_S) / period)
            if update < lower - PHASE_TOLERANCE_S:  # an update happened later than predicted
                update += period * math.ceil((lower - PHASE_TOLERANCE_S - update) / period)
            update = min(max(update, lower), upper)
            lag_s = min(max(t - update, 0.0), period)
        return self._offset_j + raw_j + self._mean_power_since(last, t, lag_s, power_w) * lag_s

    def _bridge(self, last: Reading | None, t: float, raw_j: float, power_w: float) -> float:
        """Continue the estimate from the last read by power, re-basing the counter on ``raw_j``."""
        bridged = self._integrate(last, t, power_w) if last is not None else 0.0
        self._offset_j = bridged - raw_j
        self._frozen = False
        self._raw_lower_t, self._raw_first_seen_t = self._last_raw_t, t
        self._first_seen_integral_j = self._power_integral_j
        self._last_raw_j, self._last_raw_t = raw_j, t
        return bridged

    @staticmethod
    def _mean_power_since(last: Reading | None, t: float, lag_s: float, power_w: float) -> float:
        """Mean power over (t - lag_s, t], from the power now and the previous reading.

        Using the power now alone is off by P' x lag^2 / 2, up to ~1 J per edge when power swings
        20 W within one 100 ms update. The previous reading is interpolated, never extrapolated:
        two readings a millisecond apart would turn sensor noise into a huge slope."""
        if last is None or lag_s <= 0.0 or not 0.0 < t - last.t <= 1.0:
            return power_w
        start = t - lag_s
        if start >= last.t:  # the update lies between the two readings: interpolate to it
            at_update = last.power_w + (power_w - last.power_w) * (start - last.t) / (t - last.t)
            return 0.5 * (power_w + at_update)
        # The previous reading lies inside the lag: trapezoid after it, its power before it.
        energy = (last.t - start) * last.power_w + (t - last.t) * 0.5 * (last.power_w + power_w)
        return energy / lag_s

    def calibrate(self, *, sleep: Callable[[float], None] = time.sleep) -> bool:
        """Learn the counter's update period and phase (sampler thread only; ~1-1.5 s, at most
        0.6 s of rough polling plus twelve update periods).

        Two stages: poll every ~0.5 ms until a few changes are seen (rough fit, +-0.3 ms), then
        spin-poll without sleeping in a 6 ms slot around each of the next few predicted updates to
        time them to a few microseconds. Returns whether a fit succeeded."""
        self.needs_calibration = False
        if not self.backend.counter_quantised:
            return False
        rough = self._poll_changes(
            CALIBRATION_MAX_S, CALIBRATION_POLL_S, CALIBRATION_CHANGES, sleep
        )
        if rough is None:
            return False
        trial = CounterPhase()
        if not trial.fit(rough, self.clock()) or not trial.period_s:
            with self.lock:
                return self.phase.fit(rough, self.clock())
        precise: list[float] = []
        for _ in range(2 * REFINE_UPDATES):
            if len(precise) >= REFINE_UPDATES:
                break
            now = self.clock()
            target = (trial.last_update(now) or now) + trial.period_s
            if target - now < REFINE_SLOT_S:
                target += trial.period_s
            sleep(max(0.0, target - REFINE_SLOT_S / 2 - self.clock()))
            changes = self._poll_changes(REFINE_SLOT_S, 0.0, 1, sleep)
            if changes:
                precise.append(changes[0])
        with self.lock:
            if len(precise) >= 3 and self.phase.fit(
                precise, self.clock(), period_hint=trial.period_s
            ):
                return True
            return self.phase.fit(rough, self.clock())

    def _poll_changes(
        self, max_s: float, poll_s: float, wanted: int, sleep: Callable[[float], None]
    ) -> list[float] | None:
        """Instants at which the raw counter changed; None if there is no counter.

        A change happened between two reads; its instant is the midpoint, kept only when the two
        reads are close together (the thread was not descheduled in between), so one preempted
        poll cannot skew the fit on a loaded machine."""
        changes: list[float] = []
        previous: float | None = None
        t_previous = self.clock()
        deadline = t_previous + max_s
        tolerance_s = 2.5 * poll_s + 0.0005
        polls = 0
        while len(changes) < wanted and polls < 20000:
            polls += 1
            before = self.clock()
            raw = self.backend.energy_j(self.index)
            t = self.clock()
            if raw is None:
                with self.lock:
                    self.has_counter = False
                return None
            if t - before > SLOW_READ_S:
                previous = None  # this read's instant is uncertain: restart the pairing
            elif previous is not None and raw != previous and t - t_previous <= tolerance_s:
                changes.append((t_previous + before) / 2.0)
            elif previous is not None and raw != previous:
                pass  # a change inside a long gap: its instant is too uncertain to use
            if t - before <= SLOW_READ_S:
                previous, t_previous = raw, t
            if t >= deadline:
                break
            if poll_s:
                sleep(poll_s)
        return changes

    # ----------------------------------------------------------------- attribution

    def open(self, key: int) -> Reading | None:
        """A call opens on this GPU: settle energy so far among the open calls, then add it."""
        with self.lock:
            reading = self._event_read()
            self._open[key] = 0.0
            self._notify_active()
            return reading

    def close(self, key: int) -> tuple[float, Reading | None]:
        """A call closes: settle energy so far, remove it, return its share (J)."""
        with self.lock:
            reading = self._event_read()
            share = self._open.pop(key, 0.0)
            self._notify_active()
            if not self._open:
                self._event_energy_j = None
            return share, reading

    def _event_read(self) -> Reading | None:
        reading = self.try_read()
        if reading is None:
            return None
        if self._open and self._event_energy_j is not None:
            each = max(0.0, reading.energy_j - self._event_energy_j) / len(self._open)
            for key in self._open:
                self._open[key] += each
        self._event_energy_j = reading.energy_j
        return reading

    def try_read(self) -> Reading | None:
        """``read()`` that marks the GPU stale instead of raising (used on the caller's thread)."""
        if self.stale and self.clock() < self.retry_at:
            return None
        try:
            return self.read()
        except Exception as exc:
            self.mark_failed(exc)
            return None

    def mark_failed(self, exc: BaseException) -> None:
        with self.lock:
            self.faults += 1
            self.stale = True
            self.backoff_s = min(30.0, max(0.5, self.backoff_s * 2.0))
            self.retry_at = self.clock() + self.backoff_s
        stage = "meter.device_lost" if isinstance(exc, DeviceLostError) else "meter.read"
        if isinstance(exc, NotSupportedError):
            stage = "meter.not_supported"
        record_fault(stage, exc)

    def rearm_in_child(self) -> None:
        """In a forked child: a fresh lock, and no open calls (they belong to parent threads
        that do not exist here; left open they would take a share of every child call)."""
        self.lock = threading.RLock()
        self._open.clear()
        self._event_energy_j = None
        self._notify_active()

    def _notify_active(self) -> None:
        set_active = self._set_active
        if set_active is not None:
            set_active(self.index, len(self._open))

    # ----------------------------------------------------------------- state

    @property
    def open_calls(self) -> int:
        return len(self._open)

    @property
    def last(self) -> Reading | None:
        return self._last

    @property
    def energy_total_j(self) -> float:
        """Energy since the meter started tracking this GPU (J)."""
        if self._last is None or self._first_energy_j is None:
            return 0.0
        return self._last.energy_j - self._first_energy_j

    @property
    def idle_w(self) -> float | None:
        """Median power of reads taken while no call was open (W); None before three."""
        return self._idle_median_w
