"""The simulated GPU's work model: the same calls give the same joules on any machine.

A fake wall clock stands in for this machine: how long a call takes on it (a busy or an idle
CPU) must not change the simulated figures, only the tokens and the batch size may."""

from __future__ import annotations

import pytest

from ecoguard.config import Settings
from ecoguard.energy import CallInfo, Meter
from ecoguard.energy.backends import SimulatedBackend, SimulatedWork, choose_backend
from ecoguard.errors import BackendError


class FakeClock:
    def __init__(self, t: float = 500.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


WORK = SimulatedWork(tokens_per_s=20.0, batch_speedup=((4, 3.0), (16, 9.0)), source="test")


def _backend(clock, work=WORK):
    return SimulatedBackend(
        gpu_name="Sim GPU", profile_key="sim", idle_w=50.0, busy_w=200.0, clock=clock, work=work
    )


def _run_calls(wall_s_per_call: float, idle_between_s: float) -> list[tuple[float, float]]:
    """Three calls (24 tokens at batch 1, 96 at batch 4, 12 at batch 1) on a fresh meter;
    returns (energy J, duration s) per call."""
    clock = FakeClock()
    meter = Meter(Settings(ledger_path=None), backend=_backend(clock), clock=clock, calibrate=False)
    out = []
    for tokens, batch in ((24, 1), (96, 4), (12, 1)):
        meter.sampler.sample_once()
        clock.advance(idle_between_s)
        meter.sampler.sample_once()
        window = meter.begin(devices=None, info=CallInfo(model_name="m", batch_size=batch))
        clock.advance(wall_s_per_call / 2)
        meter.sampler.sample_once()  # the sampler reads while the call runs
        clock.advance(wall_s_per_call / 2)
        record = meter.end(window, tokens=tokens, requests=batch)
        out.append((record.energy_j, record.duration_s))
    return out


def test_same_calls_same_joules_whatever_this_machine_takes():
    fast_idle = _run_calls(wall_s_per_call=0.05, idle_between_s=0.01)
    slow_busy = _run_calls(wall_s_per_call=40.0, idle_between_s=7.0)
    # Equal up to float rounding of the cumulative counter (the idle energy before differs).
    assert fast_idle == [pytest.approx(pair, rel=1e-12) for pair in slow_busy]
    # 24 tokens at 20 tok/s = 1.2 s at 200 W; 96 tokens at batch 4 (x3) = 1.6 s; 12 -> 0.6 s.
    assert [e for e, _ in fast_idle] == pytest.approx([240.0, 320.0, 120.0])
    assert [d for _, d in fast_idle] == pytest.approx([1.2, 1.6, 0.6])


def test_gpu_clock_follows_the_wall_clock_only_while_idle():
    clock = FakeClock()
    backend = _backend(clock)
    t0 = backend.gpu_time()
    clock.advance(10.0)  # idle: the GPU's clock and its idle energy follow the wall
    assert backend.gpu_time() == pytest.approx(t0 + 10.0)
    assert backend.energy_j(0) == pytest.approx(500.0)
    backend.set_active(0, 1)
    clock.advance(30.0)  # a call is open: this machine's time does not count
    assert backend.gpu_time() == pytest.approx(t0 + 10.0)
    assert backend.energy_j(0) == pytest.approx(500.0)
    backend.simulate_call(0, tokens=40, batch_size=1)  # 2 s of modelled work at 200 W
    assert backend.gpu_time() == pytest.approx(t0 + 12.0)
    assert backend.energy_j(0) == pytest.approx(900.0)
    backend.set_active(0, 0)
    clock.advance(1.0)
    assert backend.gpu_time() == pytest.approx(t0 + 13.0)
    assert backend.energy_j(0) == pytest.approx(950.0)


def test_batch_speedup_interpolates_in_log_batch_and_holds_beyond():
    assert WORK.speedup(1) == 1.0 and WORK.speedup(0) == 1.0
    assert WORK.speedup(4) == pytest.approx(3.0)
    assert WORK.speedup(8) == pytest.approx(6.0)  # halfway between 4 and 16 in log2
    assert WORK.speedup(64) == pytest.approx(9.0)  # no extrapolation past the ladder
    assert WORK.gpu_seconds(90, 8) == pytest.approx(90 / (20.0 * 6.0))
    with pytest.raises(BackendError, match="tokens/s"):
        SimulatedWork(tokens_per_s=0.0)


def test_without_a_work_model_power_follows_the_given_clock():
    clock = FakeClock()
    backend = _backend(clock, work=None)
    assert backend.gpu_clock is None
    backend.set_active(0, 1)
    clock.advance(2.0)
    backend.simulate_call(0, tokens=1000, batch_size=1)  # nothing to model
    assert backend.energy_j(0) == pytest.approx(400.0)


def test_from_settings_models_the_reference_throughput_and_says_so():
    backend = choose_backend(Settings(backend="simulated", simulated_gpu="a800", ledger_path=None))
    work = backend.work
    assert isinstance(work, SimulatedWork) and backend.gpu_clock is not None
    # The A800's batch-1 rows run at ~7-38 tokens/s; its own batch ladders reach batch 64.
    assert 5.0 < work.tokens_per_s < 40.0
    assert dict(work.batch_speedup)[8] == pytest.approx(8.0, rel=0.1)
    text = backend.assumptions()
    assert "tokens/s at batch size 1" in text and "not this machine's" in text
    assert "a800" in text and "W generating" in text
    # A GPU without batch rows borrows the measured ladders and names where they came from.
    t4 = choose_backend(Settings(backend="simulated", simulated_gpu="t4", ledger_path=None))
    assert t4.work.batch_speedup == work.batch_speedup
    assert "a800 batch ladders" in t4.assumptions()


def test_meter_uses_the_simulated_gpu_clock_for_records():
    clock = FakeClock()
    backend = choose_backend(
        Settings(backend="simulated", simulated_gpu="a800", ledger_path=None), clock=clock
    )
    meter = Meter(Settings(ledger_path=None), backend=backend, clock=clock, calibrate=False)
    window = meter.begin(devices=None, info=CallInfo(batch_size=8))
    clock.advance(123.0)
    record = meter.end(window, tokens=192, requests=8)
    seconds = backend.work.gpu_seconds(192, 8)
    assert record.duration_s == pytest.approx(seconds)
    assert record.energy_j == pytest.approx(backend.busy_w * seconds)
    assert record.tier == "simulated"
    # The sampler's schedule and health stamps stay on this machine's clock (Prometheus compares
    # them with wall time); only the GPU's readings are on the simulated GPU's clock.
    assert meter.clock is clock and meter.sampler._clock is clock


class StepClock(FakeClock):
    """A clock that moves on by ``step`` at every read: time passes between any two steps of the
    meter, as it does on a real machine."""

    def __init__(self, step: float) -> None:
        super().__init__()
        self.step = step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


@pytest.mark.parametrize("step", [1e-6, 1e-3, 0.5])
def test_a_window_holds_its_modelled_work_only(step):
    clock = StepClock(step)
    meter = Meter(Settings(ledger_path=None), backend=_backend(clock), clock=clock, calibrate=False)
    energies = []
    for _ in range(3):
        meter.sampler.sample_once()
        window = meter.begin(devices=None, info=CallInfo(batch_size=1))
        meter.sampler.sample_once()
        energies.append(meter.end(window, tokens=24, requests=1).energy_j)
    assert energies == pytest.approx([240.0] * 3, rel=1e-12)  # no idle time leaks in
