"""The sampler: one named daemon thread that reads every tracked GPU at a fixed rate.

It keeps each GPU's estimate fresh between calls (power, energy total, idle power, counter phase),
calibrates quantised counters at start and every minute (or when a read contradicts the predicted
phase), and survives backend errors: a failing GPU is marked stale and retried with exponential
backoff (0.5 s doubling to 30 s), every failure counted via ``ecoguard.faults``. Memory is bounded
(ring buffers in each :class:`~ecoguard.energy.attribution.GpuTrack`). Tests drive
:meth:`Sampler.sample_once` directly instead of starting the thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from ecoguard.energy.attribution import GpuTrack
from ecoguard.faults import record_fault

THREAD_NAME = "ecoguard-sampler"
# After a calibration that found no fit, wait this long before the next try: each try polls the
# driver for up to a second or more, and an irregular counter would otherwise be recalibrated on
# every sample, forever.
CALIBRATION_RETRY_S = 10.0


class Sampler:
    """Reads ``tracks`` at ``hz`` on a daemon thread. ``start``/``stop`` are idempotent."""

    def __init__(
        self,
        tracks: Sequence[GpuTrack],
        *,
        hz: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        calibrate: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not hz > 0:
            raise ValueError(f"sample rate must be > 0 Hz, got {hz!r}")
        self.tracks = list(tracks)
        self.interval_s = 1.0 / hz
        self.hz = hz
        self._clock = clock
        self._sleep = sleep  # the calibration's short waits (a test's manual clock moves instead)
        self._calibrate = calibrate
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # Held while the thread talks to the backend (a sample pass, one GPU's calibration): a
        # fork waits for it, so the child never inherits a driver lock taken mid-call.
        self.pass_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()  # set once the first calibration pass is done
        self.samples = 0
        self.faults = 0
        self.last_sample_monotonic: float | None = None
        self._recent: deque[float] = deque(maxlen=64)
        # CPU seconds the thread spent since its first calibration pass (recalibrations included).
        self.cpu_s = 0.0
        self.sample_cpu_s = 0.0  # CPU seconds spent in sample_once alone (no calibrations)
        self._cpu_at_ready = 0.0
        self._wall_at_ready: float | None = None
        self._calibration_retry_at: dict[int, float] = {}  # track index -> monotonic s

    def cpu_fraction(self) -> float | None:
        """Share of one core the sampler thread used since it became ready (0.001 = 0.1%)."""
        if self._wall_at_ready is None:
            return None
        wall = time.monotonic() - self._wall_at_ready
        return self.cpu_s / wall if wall > 0 else None

    def start(self, *, calibrate_first: bool = True) -> None:
        """Start the thread; ``calibrate_first=False`` skips the first calibration pass (a
        forked child inherits its parent's phase model, and the periodic checks go on)."""
        with self._lock:
            if self._thread is not None:
                return
            # A fresh event per thread: an old thread whose stop() join timed out still sees
            # its own event set and ends, instead of running on beside the new one.
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run,
                args=(self._stop, calibrate_first),
                name=THREAD_NAME,
                daemon=True,
            )
            self._thread.start()

    def rearm_in_child(self) -> None:
        """In a forked child: fresh locks and events, and the thread again if it was running.

        The parent's thread does not exist here and its locks may have been held at the fork."""
        was_running = self._thread is not None
        self._lock = threading.Lock()
        self.pass_lock = threading.Lock()
        self._thread = None
        self._stop = threading.Event()
        ready, self.ready = self.ready.is_set(), threading.Event()
        if ready:
            self.ready.set()
        self._recent.clear()
        self._wall_at_ready = None
        self.cpu_s = self.sample_cpu_s = 0.0
        if was_running:
            self.start(calibrate_first=False)

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and wait up to ``timeout`` s for it. Safe to call any number of times."""
        with self._lock:
            thread, self._thread = self._thread, None
            stop = self._stop
        stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def _run(self, stop: threading.Event, calibrate_first: bool = True) -> None:
        try:
            if self._calibrate and calibrate_first:
                self.calibrate_all()
                self._recent.clear()  # the rate is the steady one, not the calibration's
            self.ready.set()
            self._cpu_at_ready = time.thread_time()
            self._wall_at_ready = time.monotonic()
            while not stop.wait(self.interval_s):
                before = time.thread_time()
                with self.pass_lock:
                    self.sample_once()
                self.sample_cpu_s += time.thread_time() - before
                if self._calibrate:
                    self._maybe_recalibrate()
                self.cpu_s = time.thread_time() - self._cpu_at_ready
        except Exception as exc:  # the thread must never die silently with an exception
            record_fault("meter.sampler", exc)
        finally:
            self.ready.set()

    def calibrate_all(self) -> None:
        """Calibrate every quantised counter once (about 1-1.5 s per GPU: up to 0.6 s of rough
        polling, then six to twelve update periods of refinement).

        Every GPU is read first, so power, energy and whether a counter exists are known within
        milliseconds of the start, not after the calibrations of the GPUs before it (16 GPUs
        used to wait ~21 s). Between two GPUs' calibrations, every GPU is read again."""
        with self.pass_lock:
            self.sample_once()  # establishes whether each GPU has a counter at all
        for track in self.tracks:
            if self._stop.is_set():
                return
            if track.stale or not track.has_counter:
                continue
            with self.pass_lock:
                self._calibrate_track(track)
            if track is not self.tracks[-1]:
                with self.pass_lock:
                    self.sample_once()

    def _maybe_recalibrate(self) -> None:
        now = self._clock()
        for track in self.tracks:
            if track.stale or not track.has_counter or not track.backend.counter_quantised:
                continue
            if now < self._calibration_retry_at.get(track.index, 0.0):
                continue
            if track.needs_calibration or now >= track.phase.next_calibration_due():
                with self.pass_lock:
                    self._calibrate_track(track)

    def _calibrate_track(self, track: GpuTrack) -> None:
        try:
            fitted = track.calibrate(sleep=self._sleep)
        except Exception as exc:
            track.mark_failed(exc)
            self.faults += 1
            fitted = False
        if fitted or not track.backend.counter_quantised:
            self._calibration_retry_at.pop(track.index, None)
        else:
            self._calibration_retry_at[track.index] = self._clock() + CALIBRATION_RETRY_S

    def sample_once(self) -> int:
        """Read every GPU that is not waiting out a backoff; returns how many reads succeeded."""
        ok = 0
        now = self._clock()
        for track in self.tracks:
            if track.stale and now < track.retry_at:
                continue
            try:
                track.read()
                ok += 1
            except Exception as exc:
                track.mark_failed(exc)
                self.faults += 1
        self.samples += 1
        self.last_sample_monotonic = now
        self._recent.append(now)
        return ok

    def actual_hz(self) -> float | None:
        """The achieved sampling rate over the recent samples (Hz)."""
        recent = list(self._recent)
        if len(recent) < 2 or recent[-1] <= recent[0]:
            return None
        return (len(recent) - 1) / (recent[-1] - recent[0])
