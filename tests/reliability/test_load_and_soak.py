"""Load and soak: 64 threads x 200 guarded generate calls on one model, and a bounded soak.

The calls go through the guard's real generate wrapper (``ecoguard.guard.wrappers.
generate_wrapper``, wrapped with wrapt exactly as the patch table does) around a real tiny
Llama model object, with the real meter, ledger and exporter aggregates subscribed. Only the
innermost function is cheap: instead of running the network it advances a shared step clock by
the call's "GPU time" and appends one token per row, so 12,800 calls fit in seconds on two CPU
cores. The GPU is a simulated one driven by that same clock, which is what makes the energy
check exact: its power is busy while any call is open, so the energy it used while calls were
open is known independently of the meter's attribution.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import tracemalloc
from collections import Counter
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import wrapt  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from ecoguard import events  # noqa: E402
from ecoguard.config import Settings  # noqa: E402
from ecoguard.energy import start_meter  # noqa: E402
from ecoguard.energy.backends import SimulatedBackend  # noqa: E402
from ecoguard.faults import fault_counts  # noqa: E402
from ecoguard.guard.install import install  # noqa: E402
from ecoguard.guard.wrappers import generate_wrapper  # noqa: E402

# The batch-size-one streaks these loops make are the guard doing its job, not news here.
pytestmark = pytest.mark.filterwarnings("ignore::ecoguard.errors.EnergyTrapWarning")

THREADS = 64
CALLS_PER_THREAD = 200
CALL_GPU_TIME_S = 1e-4
SAMPLE_HZ = 10.0  # the default rate: the one production runs at


class WitnessBackend(SimulatedBackend):
    """A simulated GPU that also keeps, on its own, the energy it used while calls were open."""

    def __init__(self, clock, **kwargs: Any) -> None:
        super().__init__(
            gpu_name="NVIDIA A800-SXM4-80GB",
            profile_key="a800",
            idle_w=60.0,
            busy_w=300.0,
            power_limit_w=400.0,
            clock=clock,
            **kwargs,
        )
        self.busy_energy_j = 0.0

    def _advance(self) -> None:
        if self._active:
            self.busy_energy_j += self.busy_w * max(0.0, self._clock() - self._last_t)
        super()._advance()


def make_cheap_generate(clock):
    """A generate that costs nothing but moves the GPU clock, behind the guard's real wrapper."""

    def cheap_generate(self, input_ids=None, attention_mask=None, max_new_tokens=1, **kwargs):
        clock.advance(CALL_GPU_TIME_S)
        eos = torch.full((input_ids.shape[0], 1), 2, dtype=input_ids.dtype)
        return torch.cat([input_ids, eos], dim=1)

    return wrapt.FunctionWrapper(cheap_generate, generate_wrapper)


@pytest.fixture(scope="module")
def tiny_model(tiny_llama_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_llama_dir)


def _start(step_clock, tmp_path, *, hz: float = SAMPLE_HZ):
    backend = WitnessBackend(step_clock)
    settings = Settings(ledger_path=tmp_path / "ledger.sqlite", sample_hz=hz, backend="simulated")
    meter = start_meter(settings, backend=backend, clock=step_clock)
    install(settings=settings, mode="warn", measure=True)
    from ecoguard.export.prometheus import process_aggregates

    return backend, meter, process_aggregates()


def test_64_threads_x_200_calls(tiny_model, step_clock, tmp_path):
    from ecoguard.export.ledger import get_ledger, read_rows

    backend, meter, aggregates = _start(step_clock, tmp_path)
    assert meter.wait_ready(5.0)
    calls_before = sum(t.calls for t in aggregates.snapshot().generation.values())
    generate = make_cheap_generate(step_clock).__get__(tiny_model, type(tiny_model))
    seen: list[Any] = []
    unsubscribe = events.records.subscribe(seen.append)
    start = threading.Barrier(THREADS + 1)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        batch = k % 4 + 1  # threads use batch sizes 1..4: counts per size are known
        ids = torch.tensor([[1, 5, 6, 7]] * batch)
        try:
            start.wait()
            for _ in range(CALLS_PER_THREAD):
                out = generate(input_ids=ids, max_new_tokens=1)
                assert out.shape == (batch, 5)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(THREADS)]
    for thread in threads:
        thread.start()
    samples_before = meter.sampler.samples
    start.wait()
    wall0 = time.monotonic()
    deadline = wall0 + 120.0
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    wall_s = time.monotonic() - wall0
    samples = meter.sampler.samples - samples_before
    unsubscribe()
    assert not any(t.is_alive() for t in threads), "deadlock: threads still running after 120 s"
    assert errors == []

    total = THREADS * CALLS_PER_THREAD
    # Every call recorded exactly once: on the bus, by the meter, per batch size.
    assert len(seen) == total == meter.records_published
    expected_sizes = Counter({b: (THREADS // 4) * CALLS_PER_THREAD for b in (1, 2, 3, 4)})
    assert Counter(r.batch_size for r in seen) == expected_sizes
    assert sum(r.tokens for r in seen) == sum(b * n for b, n in expected_sizes.items())
    assert all(r.complete and r.tier == "simulated" for r in seen)

    # Attributed energy adds up to what the GPU used while calls were open.
    attributed_j = sum(r.energy_j for r in seen)
    witness_j = backend.busy_energy_j
    assert witness_j == pytest.approx(300.0 * CALL_GPU_TIME_S * total, rel=1e-6)
    assert attributed_j == pytest.approx(witness_j, rel=0.005)

    # The ledger wrote every record once; the exporter counted every call once.
    ledger = get_ledger()
    assert ledger is not None and ledger.flush(30.0)
    stats = ledger.stats()
    assert stats["dropped"] == 0 and stats["degraded"] is None
    assert len(read_rows(tmp_path / "ledger.sqlite")) == total
    calls = sum(t.calls for t in aggregates.snapshot().generation.values()) - calls_before
    assert calls == total

    # The sampler kept sampling while 64 threads hammered the guard. Its rate here is bounded
    # by the GIL, not by ecoguard (64 runnable Python threads share one interpreter lock; see
    # RELIABILITY.md): measured 45-91% of the target on this 2-core box, and lower still while
    # other test processes share the cores. A lock convoy inside ecoguard would drive it towards
    # zero, which is what this bound catches; it sits well below the load-driven range.
    assert samples >= 0.25 * SAMPLE_HZ * wall_s, (samples, wall_s)
    assert not {k: v for k, v in fault_counts().items() if k.startswith(("guard.", "meter."))}
    _report(
        "load",
        calls=total,
        wall_s=round(wall_s, 2),
        calls_per_s=round(total / wall_s),
        attributed_j=attributed_j,
        witness_j=witness_j,
        relative_error=abs(attributed_j - witness_j) / witness_j,
        sampler_hz=round(samples / wall_s, 1),
    )


def _report(name: str, **figures: Any) -> None:
    """Figures for RELIABILITY.md, printed with -s and kept in the pytest log otherwise."""
    print(f"\n[reliability:{name}] " + " ".join(f"{k}={v}" for k, v in figures.items()))


def _rss_kib() -> int:
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return 60.0 * sum((t - mean_t) * (v - mean_v) for t, v in points) / var


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_soak_memory_stays_flat(tiny_model, step_clock, tmp_path):
    """Minutes of guarded calls from 8 threads (cheap calls, plus a real tiny-model generate
    every 50th call) with the meter, ledger and exporter on: Python heap (tracemalloc) and RSS
    are sampled every 5 s; after a warm-up their growth must be flat. RELIABILITY_SOAK_S sets
    the duration (default 180 s; not an ECOGUARD_* name, which the shared fixtures clear)."""
    duration_s = float(os.environ.get("RELIABILITY_SOAK_S", "180"))
    _backend, meter, _aggregates = _start(step_clock, tmp_path, hz=10.0)
    generate = make_cheap_generate(step_clock).__get__(tiny_model, type(tiny_model))
    stop = threading.Event()
    done = Counter()
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        ids = torch.tensor([[1, 5, 6, 7]] * (k % 3 + 1))
        i = 0
        try:
            while not stop.is_set():
                i += 1
                if i % 50 == 0:
                    tiny_model.generate(input_ids=ids, max_new_tokens=2, do_sample=False)
                else:
                    generate(input_ids=ids, max_new_tokens=1)
                done[k] += 1
        except BaseException as exc:
            errors.append(exc)

    tracemalloc.start()
    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(8)]
    for thread in threads:
        thread.start()
    t0 = time.monotonic()
    heap: list[tuple[float, float]] = []
    rss: list[tuple[float, float]] = []
    while (elapsed := time.monotonic() - t0) < duration_s:
        time.sleep(5.0)
        gc.collect()
        heap.append((elapsed, tracemalloc.get_traced_memory()[0] / 1024))
        rss.append((elapsed, float(_rss_kib())))
    stop.set()
    for thread in threads:
        thread.join(30)
    tracemalloc.stop()
    assert errors == []
    warm = [p for p in heap if p[0] >= duration_s / 3]
    warm_rss = [p for p in rss if p[0] >= duration_s / 3]
    heap_slope = _slope_per_min(warm)
    rss_slope = _slope_per_min(warm_rss)
    calls = sum(done.values())
    _report(
        "soak",
        duration_s=duration_s,
        calls=calls,
        records=meter.records_published,
        heap_kib_start=round(warm[0][1]),
        heap_kib_end=round(warm[-1][1]),
        heap_slope_kib_per_min=round(heap_slope, 1),
        rss_kib_start=round(warm_rss[0][1]),
        rss_kib_end=round(warm_rss[-1][1]),
        rss_slope_kib_per_min=round(rss_slope, 1),
    )
    # A leak of even 100 bytes per call would grow the heap by megabytes per minute here.
    assert heap_slope < 256.0, f"Python heap grows {heap_slope:.0f} KiB/min"
    assert rss_slope < 2048.0, f"RSS grows {rss_slope:.0f} KiB/min"
