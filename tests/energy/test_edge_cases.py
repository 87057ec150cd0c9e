"""Edge cases of the meter's bookkeeping: stale GPUs at a call's start, failing calibrations."""

from __future__ import annotations

from ecoguard.config import Settings
from ecoguard.energy import CallInfo, Meter
from ecoguard.energy.backends import DeviceInfo
from ecoguard.errors import DeviceLostError


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Backend:
    """A linear counter (100 W) whose reads fail on demand; ``quantised`` on request."""

    name, tier = "test", "live"

    def __init__(self, clock, *, quantised: bool = False) -> None:
        self.clock = clock
        self.counter_quantised = quantised
        self.fail: BaseException | None = None

    def device_count(self):
        return 1

    def device_info(self, index):
        return DeviceInfo(index=0, name="Test GPU", uuid="GPU-test", power_limit_w=400.0)

    def energy_j(self, index):
        if self.fail is not None:
            raise self.fail
        return self.clock() * 100.0

    def power_w(self, index):
        return 100.0

    def close(self):
        pass


def _meter(backend, clock):
    return Meter(Settings(ledger_path=None), backend=backend, clock=clock, calibrate=False)


def test_call_opened_while_its_gpu_was_unreadable_is_incomplete():
    clock = FakeClock()
    backend = Backend(clock)
    meter = _meter(backend, clock)
    meter.sampler.sample_once()
    backend.fail = DeviceLostError("gone")
    meter.sampler.sample_once()  # the GPU is stale, backing off for 0.5 s
    window = meter.begin(devices=(0,), info=CallInfo())  # no reading at the call's start
    backend.fail = None
    clock.advance(1.0)  # backoff over: the end reads fine
    record = meter.end(window, tokens=10, requests=1)
    # The call's start was never read, so its energy (0 J here) is a lower bound, not a figure.
    assert record is not None and record.energy_j == 0.0
    assert record.complete is False


def test_failed_calibration_is_not_retried_on_every_sample():
    clock = FakeClock()
    meter = Meter(Settings(ledger_path=None), backend=Backend(clock, quantised=True), clock=clock)
    track = meter.tracks[0]
    attempts = []

    def failing_calibrate(**_):
        attempts.append(clock())
        track.needs_calibration = False
        return False  # e.g. an irregular counter whose updates fit no grid

    track.calibrate = failing_calibrate
    meter.sampler.sample_once()
    for _ in range(20):  # 2 s of 10 Hz samples
        meter.sampler._maybe_recalibrate()
        clock.advance(0.1)
    assert len(attempts) == 1  # each attempt polls the driver for up to a second
    clock.advance(60.0)
    meter.sampler._maybe_recalibrate()
    assert len(attempts) == 2  # but it is retried later


class _Field:
    def __init__(self, code: int, milliwatts: int = 0) -> None:
        self.nvmlReturn = code
        self.valueType = 1  # unsigned int
        self.value = type("V", (), {"uiVal": milliwatts})()


class FieldNvml:
    """Just enough of pynvml for NvmlBackend.power_w: field 186 answers ``code`` on demand."""

    def __init__(self) -> None:
        self.code = 0

    def nvmlDeviceGetFieldValues(self, handle, fields):
        return [_Field(self.code, 250_000)]

    def nvmlDeviceGetPowerUsage(self, handle):
        return 200_000  # 1 s averaged mW


def test_transient_field_error_does_not_drop_instant_power_for_good():
    from ecoguard.energy.backends import NvmlBackend

    nvml = FieldNvml()
    backend = NvmlBackend(nvml, handles=[object()], physical=[0])
    assert backend.power_w(0) == 250.0 and backend.power_method(0) == "instant_power"
    nvml.code = 999  # NVML_ERROR_UNKNOWN for this one read: the averaged reading stands in
    assert backend.power_w(0) == 200.0
    nvml.code = 0
    assert backend.power_w(0) == 250.0  # still field 186, not the 1 s average
    assert backend.power_method(0) == "instant_power"
    nvml.code = 3  # NOT_SUPPORTED: this GPU has no instant power, fall back for good
    assert backend.power_w(0) == 200.0 and backend.power_method(0) == "power_usage"


class TwoGpus(Backend):
    """GPU 0 answers nothing (lost before the meter started); GPU 1 works."""

    def device_count(self):
        return 2

    def device_info(self, index):
        if index == 0:
            raise DeviceLostError("GPU 0 fell off the bus")
        return DeviceInfo(index=1, name="Good GPU", uuid="GPU-good", power_limit_w=400.0)

    def energy_j(self, index):
        if index == 0:
            raise DeviceLostError("GPU 0 fell off the bus")
        return self.clock() * 100.0


def test_a_gpu_lost_at_startup_does_not_cost_the_others_their_measurement():
    from ecoguard.faults import fault_counts, reset_faults

    reset_faults()
    clock = FakeClock()
    meter = _meter(TwoGpus(clock), clock)
    assert fault_counts().get("meter.device_info") == 1
    assert [t.info.name for t in meter.tracks] == ["GPU 0 (unavailable)", "Good GPU"]
    meter.sampler.sample_once()
    window = meter.begin(devices=(1,), info=CallInfo())
    clock.advance(2.0)
    record = meter.end(window, tokens=10, requests=1)
    assert record.gpu_names == ("Good GPU",) and abs(record.energy_j - 200.0) < 1e-6
    states = {s.index: s for s in meter.gpu_states()}
    assert states[0].stale and not states[1].stale


def test_restart_after_a_timed_out_stop_leaves_one_sampler_thread():
    """stop() gives up waiting after its timeout; a start() then must not leave the old thread
    sampling beside the new one."""
    import threading

    from ecoguard.energy.sampler import THREAD_NAME, Sampler

    sampler = Sampler([], hz=100.0, calibrate=False)
    gate, entered = threading.Event(), threading.Event()

    def slow_sample():
        entered.set()
        gate.wait(5.0)

    sampler.sample_once = slow_sample
    sampler.start()
    assert entered.wait(5.0)
    old = sampler._thread
    sampler.stop(timeout=0.01)  # the old thread is stuck inside a sample
    sampler.sample_once = lambda: None
    sampler.start()
    gate.set()  # the old thread finishes its sample and must now end
    old.join(5.0)
    alive = [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]
    try:
        assert len(alive) == 1
    finally:
        sampler.stop()


class SixteenGpus(Backend):
    def device_count(self):
        return 16

    def device_info(self, index):
        return DeviceInfo(index=index, name="Test GPU", uuid=f"GPU-{index}", power_limit_w=400.0)


def test_every_gpu_is_read_before_the_first_calibration():
    """Calibrating a counter takes ~1-1.5 s per GPU. Each GPU used to get its first reading only
    after the GPUs before it were calibrated (16 GPUs: ~21 s without power readings); now
    every GPU is read first, and all again between two calibrations."""
    clock = FakeClock()
    meter = Meter(
        Settings(ledger_path=None), backend=SixteenGpus(clock, quantised=True), clock=clock
    )
    seen: list[tuple[int, int]] = []  # (GPU being calibrated, GPUs read so far)

    for track in meter.tracks:

        def calibrate(track=track, **_):
            seen.append((track.index, sum(t.last is not None for t in meter.tracks)))
            clock.advance(1.3)
            return True

        track.calibrate = calibrate
    meter.sampler.calibrate_all()
    assert seen == [(i, 16) for i in range(16)]
    reads = [t.reads for t in meter.tracks]
    assert reads == [16] * 16  # one pass first, one between each two calibrations


class NoisyIdle(Backend):
    """Instant power from a seeded random sequence, with repeats (ties in the median)."""

    def __init__(self, clock) -> None:
        super().__init__(clock)
        import random

        self.random = random.Random(7)

    def power_w(self, index):
        return float(self.random.choice([55.0, 60.5, 61.25, 70.0])) + self.random.random()


def test_idle_power_is_the_median_of_the_idle_ring_through_its_wrap():
    import statistics

    from ecoguard.energy.attribution import IDLE_RING

    clock = FakeClock()
    meter = _meter(NoisyIdle(clock), clock)
    track = meter.tracks[0]
    seen = []
    for read in range(IDLE_RING + 250):
        clock.advance(0.01)
        seen.append(track.read().power_w)
        expected = statistics.median(seen[-IDLE_RING:]) if len(seen) >= 3 else None
        assert track.idle_w == expected, read
    window = meter.begin(devices=(0,), info=CallInfo())
    seen.append(track.last.power_w)  # the opening read: no call was open yet, so idle
    clock.advance(0.01)
    track.read()  # a read while the call is open is not idle: the median stays
    record = meter.end(window, tokens=1, requests=1)
    assert track.idle_w == statistics.median(seen[-IDLE_RING:])
    assert record.idle_power_w == track.idle_w
