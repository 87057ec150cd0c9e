"""The simulated backend, the sampler's fault handling and ``measure``, with injected clocks."""

from __future__ import annotations

import threading

import pytest

from ecoguard.config import Settings
from ecoguard.energy import CallInfo, Meter, get_meter, start_meter, stop_meter
from ecoguard.energy.backends import DeviceInfo, NullBackend, SimulatedBackend, choose_backend
from ecoguard.energy.measure import measure
from ecoguard.errors import BackendError, DeviceLostError
from ecoguard.faults import fault_counts, reset_faults


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def _simulated(clock, idle_w=50.0, busy_w=300.0):
    return SimulatedBackend(
        gpu_name="Sim GPU", profile_key="sim", idle_w=idle_w, busy_w=busy_w, clock=clock
    )


def _meter(backend, clock, **settings):
    return Meter(
        Settings(ledger_path=None, **settings), backend=backend, clock=clock, calibrate=False
    )


def test_simulated_power_follows_open_calls():
    clock = FakeClock()
    meter = _meter(_simulated(clock), clock)
    meter.sampler.sample_once()
    clock.advance(10.0)
    meter.sampler.sample_once()  # 10 s idle at 50 W
    window = meter.begin(devices=None, info=CallInfo(model_name="m", batch_size=2))
    clock.advance(2.0)
    record = meter.end(window, tokens=100, requests=2)
    assert record.energy_j == pytest.approx(600.0)  # 2 s busy at 300 W
    assert record.tier == "simulated" and record.method == "counter"
    assert record.joules_per_token == pytest.approx(6.0)
    assert record.idle_power_w == pytest.approx(50.0)
    assert record.gpu_names == ("Sim GPU",) and record.requests == 2 and record.batch_size == 2
    state = meter.gpu_states()[0]
    assert state.tier == "simulated" and state.energy_j_total == pytest.approx(1100.0)


def test_overlapping_calls_split_by_time_overlap():
    clock = FakeClock()
    meter = _meter(_simulated(clock, idle_w=0.0, busy_w=100.0), clock)
    a = meter.begin(devices=(0,), info=CallInfo(label="a"))
    clock.advance(1.0)  # a alone: 100 J to a
    b = meter.begin(devices=(0,), info=CallInfo(label="b"))
    clock.advance(2.0)  # both: 200 J split 100/100
    rec_a = meter.end(a, tokens=1, requests=1)
    clock.advance(1.0)  # b alone: 100 J to b
    rec_b = meter.end(b, tokens=1, requests=1)
    assert rec_a.energy_j == pytest.approx(200.0)
    assert rec_b.energy_j == pytest.approx(200.0)
    assert rec_a.energy_j + rec_b.energy_j == pytest.approx(400.0)  # the GPU's busy energy
    assert meter.end(a, tokens=1, requests=1) is None  # a window closes once


def test_simulated_from_settings_uses_the_knowledge_tables():
    pytest.importorskip("ecoguard.knowledge")
    backend = choose_backend(Settings(backend="simulated", simulated_gpu="a800", ledger_path=None))
    assert isinstance(backend, SimulatedBackend)
    assert backend.profile_key == "a800" and "A800" in backend.device_info(0).name
    assert 0 < backend.idle_w < backend.busy_w <= 3 * 400
    assert choose_backend(Settings(backend="null")).device_count() == 0
    assert isinstance(choose_backend(Settings(backend="auto")), NullBackend)  # no driver here


class FlakyBackend:
    """A backend whose reads fail on demand, with a linear counter."""

    name, tier, counter_quantised = "flaky", "live", False

    def __init__(self, clock, *, power_w=100.0):
        self.clock = clock
        self.power = power_w
        self.fail: BaseException | None = None
        self.calls = 0

    def device_count(self):
        return 1

    def device_info(self, index):
        return DeviceInfo(index=0, name="Flaky", uuid="GPU-flaky", power_limit_w=400.0)

    def energy_j(self, index):
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return self.clock() * 100.0

    def power_w(self, index):
        return self.power

    def close(self):
        pass


def test_sampler_survives_errors_with_backoff_and_recovers():
    reset_faults()
    clock = FakeClock()
    backend = FlakyBackend(clock)
    meter = _meter(backend, clock)
    sampler, track = meter.sampler, meter.tracks[0]
    assert sampler.sample_once() == 1
    backend.fail = DeviceLostError("gone")
    assert sampler.sample_once() == 0
    assert track.stale and track.backoff_s == 0.5
    calls = backend.calls
    clock.advance(0.1)
    sampler.sample_once()  # still backing off: no read attempted
    assert backend.calls == calls
    clock.advance(0.5)
    sampler.sample_once()  # retried, failed again: backoff doubles
    assert track.backoff_s == 1.0 and backend.calls == calls + 1
    backend.fail = None
    clock.advance(1.0)
    assert sampler.sample_once() == 1
    assert not track.stale
    assert fault_counts()["meter.device_lost"] == 2
    backend.fail = BackendError("weird")  # calls go on while the GPU is broken
    window = meter.begin(devices=(0,), info=CallInfo())
    record = meter.end(window, tokens=3, requests=1)
    assert record is not None and record.complete is False and record.energy_j == 0.0


def test_absurd_power_is_discarded():
    reset_faults()
    clock = FakeClock()
    backend = FlakyBackend(clock)
    meter = _meter(backend, clock)
    meter.sampler.sample_once()
    backend.power = 5000.0  # above 3x the 400 W limit
    meter.sampler.sample_once()
    assert meter.gpu_states()[0].power_w == 100.0
    backend.power = -3.0
    meter.sampler.sample_once()
    assert meter.gpu_states()[0].power_w == 100.0
    assert fault_counts()["meter.absurd_power"] == 2


def test_sampler_thread_is_named_daemon_and_stops_idempotently():
    meter = Meter(
        Settings(ledger_path=None, sample_hz=200.0),
        backend=_simulated(FakeClock()),
        calibrate=False,
    )
    meter.start()
    assert meter.wait_ready(2.0)
    threads = [t for t in threading.enumerate() if t.name == "ecoguard-sampler"]
    assert len(threads) == 1 and threads[0].daemon
    meter.stop()
    meter.stop()
    assert not meter.sampler.running
    assert not [t for t in threading.enumerate() if t.name == "ecoguard-sampler"]


def test_ring_buffers_are_bounded():
    clock = FakeClock()
    meter = _meter(_simulated(clock), clock)
    for _ in range(5000):
        clock.advance(0.1)
        meter.sampler.sample_once()
    track = meter.tracks[0]
    assert len(track.samples) == track.samples.maxlen
    assert track.energy_total_j == pytest.approx(50.0 * 0.1 * 4999)  # since the first read


def test_start_meter_is_idempotent_and_measure_counts_this_context_only():
    clock = FakeClock()
    meter = start_meter(Settings(ledger_path=None), backend=_simulated(clock), clock=clock)
    try:
        assert start_meter(Settings(ledger_path=None)) is meter and get_meter() is meter
        other_thread_record = []
        with measure("block") as m:
            window = meter.begin(devices=None, info=CallInfo())
            clock.advance(1.0)
            meter.end(window, tokens=40, requests=1)

            def elsewhere():
                w = meter.begin(devices=None, info=CallInfo())
                other_thread_record.append(meter.end(w, tokens=1000, requests=1))

            thread = threading.Thread(target=elsewhere)
            thread.start()
            thread.join()
            m.add_tokens(10)
            clock.advance(0.5)  # idle inside the block: counted in the block's energy
        assert m.tokens == 50
        assert m.duration_s == pytest.approx(1.5)
        assert m.energy_j == pytest.approx(300.0 + 25.0)
        assert m.attributed_energy_j == pytest.approx(300.0)
        assert m.joules_per_token == pytest.approx(325.0 / 50)
        assert m.gpus == ("Sim GPU",) and m.tier == "simulated"
        assert other_thread_record[0].tokens == 1000
    finally:
        stop_meter()
    assert get_meter() is None


class ScriptedCounter(FlakyBackend):
    """A counter the test sets by hand (J), for stuck and leaping counters."""

    def __init__(self, clock):
        super().__init__(clock, power_w=300.0)
        self.counter = 1000.0

    def energy_j(self, index):
        return self.counter


def test_frozen_counter_falls_back_to_power():
    reset_faults()
    clock = FakeClock()
    backend = ScriptedCounter(clock)
    meter = _meter(backend, clock)
    window = meter.begin(devices=None, info=CallInfo())
    for _ in range(50):  # 5 s at 300 W while the counter stays at 1000 J
        clock.advance(0.1)
        meter.sampler.sample_once()
    record = meter.end(window, tokens=1, requests=1)
    assert record.energy_j == pytest.approx(1500.0, rel=0.01)
    assert fault_counts()["meter.counter_frozen"] == 1
    backend.counter += 500.0  # moving again, catching up: no double count
    clock.advance(0.1)
    meter.sampler.sample_once()
    window = meter.begin(devices=None, info=CallInfo())
    clock.advance(0.1)
    backend.counter += 30.0
    assert meter.end(window, tokens=1, requests=1).energy_j == pytest.approx(30.0)


def test_absurd_counter_jump_is_bridged_by_power():
    reset_faults()
    clock = FakeClock()
    backend = ScriptedCounter(clock)
    meter = _meter(backend, clock)
    window = meter.begin(devices=None, info=CallInfo())
    clock.advance(0.1)
    backend.counter += 1e9  # a 10 GW GPU: garbage
    record = meter.end(window, tokens=1, requests=1)
    assert record.energy_j == pytest.approx(30.0)  # 0.1 s at 300 W, from power
    assert fault_counts()["meter.counter_jump"] == 1


def test_reference_lookup_is_cached_across_prompt_lengths(monkeypatch):
    """The reference is per configuration: calls whose prompts differ by a few tokens must not
    each run the estimator on the caller's thread."""
    from ecoguard.deployment import Deployment, GpuSpec, ModelSpec
    from ecoguard.knowledge import estimator

    calls = []
    real = estimator.estimate

    def counting(deployment, **kwargs):
        calls.append(deployment.prompt_tokens)
        return real(deployment, **kwargs)

    monkeypatch.setattr(estimator, "estimate", counting)
    clock = FakeClock()
    meter = _meter(_simulated(clock), clock)
    meter.sampler.sample_once()
    for prompt in range(100, 150):
        deployment = Deployment(
            model=ModelSpec(id="mistral-7b", params_b=7.24),
            gpu=GpuSpec(profile="a800"),
            precision="fp16",
            batch_size=1,
            prompt_tokens=prompt,
            generation_tokens=256,
        )
        info = CallInfo(model_name="m", precision="fp16", batch_size=1, deployment=deployment)
        window = meter.begin(devices=None, info=info)
        clock.advance(0.1)
        record = meter.end(window, tokens=10, requests=1)
        assert record.reference_j_per_token is not None
    assert sorted(set(calls)) == [128, 256] and len(calls) == 2
