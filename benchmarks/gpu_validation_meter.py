"""Part 1 of the GPU validation: meter truth (see gpu_validation.py).

Windows of fixed length of real work, each measured four ways at once:

* ``ecoguard``: the meter's record for the window (energy counter, edges corrected from power);
* ``trace``: an independent ~100 Hz trace of instant power (NVML field 186, else
  ``nvmlDeviceGetPowerUsage``) read by a thread of this script straight through pynvml, not
  through ecoguard, integrated over the record's own start and end (trapezoids, edges
  interpolated);
* ``counter``: the energy counter read at the window's edges, no correction (Zeus's method);
* ``zeus``: Zeus's ``ZeusMonitor`` (when the ``zeus`` package imports; skipped with a note
  otherwise);
* ``truth`` (fake driver only): the exact energy of the window from the fake's power formula.

On a GPU there is no exact truth: the table shows each method against the trace and against
Zeus. Then the guard's cost on the GPU path (a meter window's two edges, and a whole guarded
generate call against the same call unguarded) and the sampler thread's CPU.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ecoguard.config import Settings
from ecoguard.energy import CallInfo, Meter
from ecoguard.energy.backends import NvmlBackend

GPU_WINDOWS = {0.05: 20, 0.2: 10, 1.0: 5, 5.0: 2}  # window length (s) -> windows
TINY_WINDOWS = {0.02: 3, 0.05: 3, 0.2: 2}
FIELD_POWER_INSTANT = 186
# nvmlValueType_t -> the nvmlValue_t member holding the value (dVal, uiVal, ulVal, ullVal, ...).
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


class PowerTrace:
    """A daemon thread reading GPU 0's power at ``hz`` straight from pynvml (independent of
    ecoguard's sampler): instant power (field 186) where the driver has it, else
    ``nvmlDeviceGetPowerUsage`` (on recent drivers a one-second average: said in ``method``)."""

    def __init__(self, pynvml: Any, handle: Any, hz: float = 100.0) -> None:
        self._nvml, self._handle, self._period = pynvml, handle, 1.0 / hz
        self.samples: list[tuple[float, float]] = []  # (time.monotonic() s, W)
        self.method = "field 186 (instant)"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-validation-trace", daemon=True)

    def read_w(self) -> float:
        if self.method.startswith("field"):
            value = self._nvml.nvmlDeviceGetFieldValues(self._handle, [FIELD_POWER_INSTANT])[0]
            if int(value.nvmlReturn) == 0:
                member = _VALUE_MEMBERS[int(value.valueType)]
                return float(getattr(value.value, member)) / 1000.0
            self.method = "nvmlDeviceGetPowerUsage (driver-averaged)"
        return float(self._nvml.nvmlDeviceGetPowerUsage(self._handle)) / 1000.0

    def start(self) -> PowerTrace:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.read_w()))
            next_at += self._period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    @property
    def actual_hz(self) -> float | None:
        if len(self.samples) < 2:
            return None
        return (len(self.samples) - 1) / (self.samples[-1][0] - self.samples[0][0])

    def energy_j(self, t0: float, t1: float) -> float | None:
        """Energy between ``t0`` and ``t1`` (s) from the trace; None where it does not cover them."""
        points = self.samples
        if len(points) < 2 or points[0][0] > t0 or points[-1][0] < t1:
            return None
        inside = [(t, w) for t, w in points if t0 < t < t1]
        edges = [(t0, _interpolate(points, t0)), *inside, (t1, _interpolate(points, t1))]
        return sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(edges))


def _interpolate(points: list[tuple[float, float]], t: float) -> float:
    for (ta, wa), (tb, wb) in itertools.pairwise(points):
        if ta <= t <= tb:
            return wa if tb == ta else wa + (wb - wa) * (t - ta) / (tb - ta)
    raise ValueError(f"time {t} is outside the trace")


def work_function(on_cuda: bool) -> Callable[[float], None]:
    """Busy work for ``seconds``: FP16 8192^3 matmuls on the GPU (about 1 ms each on an H100),
    small float32 matmuls on the CPU in tiny mode."""
    import torch

    size, device = (8192, "cuda") if on_cuda else (128, "cpu")
    dtype = torch.float16 if on_cuda else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)

    def work(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            a @ b
            if on_cuda:
                torch.cuda.synchronize()

    work(0.05)  # cuBLAS handles and the first kernel launch happen here, not in a window
    return work


def load_zeus(tiny: bool) -> tuple[Any, str]:
    """``(ZeusMonitor on GPU 0, note)``, or ``(None, why not)``. Zeus enumerates GPUs by
    ``CUDA_VISIBLE_DEVICES``, which tiny mode empties for torch: it is shown GPU 0 (the fake)
    while it starts."""
    try:
        from zeus.monitor import ZeusMonitor
    except Exception as exc:  # not installed, or a dependency of it missing
        return None, f"skipped: zeus does not import ({type(exc).__name__}: {exc})"
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    if tiny:
        os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    try:
        return ZeusMonitor(gpu_indices=[0]), "ZeusMonitor(gpu_indices=[0]) beside ecoguard"
    except Exception as exc:
        return None, f"skipped: ZeusMonitor did not start ({type(exc).__name__}: {exc})"
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


def _zeus_gpu_j(measurement: Any) -> float:
    """GPU 0's joules of a Zeus Measurement (``total_energy`` would add the CPU's where Zeus
    reads RAPL too)."""
    per_gpu = getattr(measurement, "gpu_energy", None) or {}
    return float(per_gpu[0]) if 0 in per_gpu else float(measurement.total_energy)


@dataclass
class WindowRun:
    """One measured window: each method's joules (None where a method did not run)."""

    window_s: float
    duration_s: float
    start: float
    end: float
    ecoguard_j: float
    counter_j: float
    zeus_j: float | None = None
    trace_j: float | None = None
    truth_j: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def measure_windows(
    meter: Meter,
    counter: Callable[[], float],
    zeus: Any,
    work: Callable[[float], None],
    windows: dict[float, int],
    seed: int = 1,
) -> list[WindowRun]:
    """Each window starts at a random phase of the counter's ~100 ms update cycle."""
    rng = random.Random(seed)
    info = CallInfo(model_name="gpu-validation", label="meter-truth")
    runs = []
    for window_s, repeats in windows.items():
        for i in range(repeats):
            time.sleep(rng.uniform(0.0, 0.1))
            if zeus is not None:
                zeus.begin_window(f"w{window_s}-{i}", sync_execution=False)
            window = meter.begin(devices=(0,), info=info)
            c0 = counter()
            work(window_s)
            c1 = counter()
            record = meter.end(window, tokens=1, requests=1)
            if record is None:
                raise RuntimeError("the meter gave no record for GPU 0: is it visible to NVML?")
            zeus_j = None
            if zeus is not None:
                zeus_j = _zeus_gpu_j(zeus.end_window(f"w{window_s}-{i}", sync_execution=False))
            runs.append(
                WindowRun(
                    window_s=window_s,
                    duration_s=record.duration_s,
                    start=record.start_monotonic,
                    end=record.end_monotonic,
                    ecoguard_j=record.energy_j,
                    counter_j=c1 - c0,
                    zeus_j=zeus_j,
                )
            )
    return runs


def _median_pct(pairs: list[tuple[float | None, float | None]]) -> float | None:
    errors = [abs(x - ref) / ref * 100 for x, ref in pairs if x is not None and ref]
    return round(statistics.median(errors), 3) if errors else None


def window_table(runs: list[WindowRun]) -> list[dict[str, Any]]:
    """Per window length: medians of each method's J and of its |difference| (%) from the
    trace, from Zeus and (fake driver) from the truth."""
    table = []
    for window_s in sorted({r.window_s for r in runs}):
        group = [r for r in runs if r.window_s == window_s]
        line: dict[str, Any] = {
            "window_s": window_s,
            "n": len(group),
            "duration_s": round(statistics.median(r.duration_s for r in group), 4),
        }
        for method in ("ecoguard", "trace", "counter", "zeus", "truth"):
            values = [getattr(r, f"{method}_j") for r in group]
            known = [v for v in values if v is not None]
            line[f"{method}_j"] = round(statistics.median(known), 4) if known else None
        for method in ("ecoguard", "counter", "zeus"):
            line[f"{method}_vs_trace_pct"] = _median_pct(
                [(getattr(r, f"{method}_j"), r.trace_j) for r in group]
            )
        line["ecoguard_vs_zeus_pct"] = _median_pct([(r.ecoguard_j, r.zeus_j) for r in group])
        for method in ("ecoguard", "trace", "counter", "zeus"):
            line[f"{method}_vs_truth_pct"] = _median_pct(
                [(getattr(r, f"{method}_j"), r.truth_j) for r in group]
            )
        table.append(line)
    return table


def edge_cost_us(meter: Meter, pairs: int) -> dict[str, float]:
    """What a guarded call pays the meter on this driver: one ``begin`` + ``end`` pair on GPU 0
    (each reads the counter and power through NVML), wall and thread CPU, in microseconds."""
    info = CallInfo(model_name="gpu-validation", label="edge-cost")
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    for _ in range(pairs):
        meter.end(meter.begin(devices=(0,), info=info), tokens=1, requests=1)
    return {
        "pairs": pairs,
        "wall_us": round((time.perf_counter() - wall0) / pairs * 1e6, 2),
        "cpu_us": round((time.thread_time() - cpu0) / pairs * 1e6, 2),
    }


def guard_call_overhead(on_cuda: bool, *, calls: int, rounds: int, tokens: int) -> dict[str, Any]:
    """A whole ``generate`` call guarded (warn mode, meter on, this NVML) against the same call
    unguarded (the original ``GenerationMixin.generate``), A/B/A per round, thread CPU and wall
    per call; medians over rounds. The model is the tiny Llama on this device, so the call is
    short and the guard's share shows."""
    import torch
    import transformers
    from transformers.generation.utils import GenerationMixin

    from ecoguard.energy import get_meter
    from ecoguard.guard.install import install, uninstall
    from ecoguard.testing.models import tiny_config

    torch.manual_seed(0)
    device = "cuda" if on_cuda else "cpu"
    model = transformers.LlamaForCausalLM(tiny_config("llama")).to(device).eval()
    ids = torch.randint(3, 200, (1, 8), generator=torch.Generator().manual_seed(0)).to(device)
    original = vars(GenerationMixin)["generate"]  # before install: the unwrapped function
    kwargs = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)

    def block(generate: Callable[..., Any]) -> tuple[float, float]:
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        with torch.inference_mode():
            for _ in range(calls):
                generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
            if on_cuda:
                torch.cuda.synchronize()
        return (time.perf_counter() - wall0) / calls, (time.thread_time() - cpu0) / calls

    install(settings=Settings(ledger_path=None, mode="warn", measure=True))
    try:

        def bare(*a: Any, **k: Any) -> Any:
            return original(model, *a, **k)

        block(model.generate), block(bare)  # warm-up; the guard judges the model once here
        meter = get_meter()
        before = meter.records_published if meter is not None else 0
        wall, cpu = [], []
        for _ in range(rounds):
            a1, b, a2 = block(bare), block(model.generate), block(bare)
            wall.append(b[0] - (a1[0] + a2[0]) / 2)
            cpu.append(b[1] - (a1[1] + a2[1]) / 2)
        windows = (meter.records_published - before) if meter is not None else 0
    finally:
        uninstall()
    return {
        "device": device,
        "calls_per_block": calls,
        "rounds": rounds,
        "new_tokens": tokens,
        "added_wall_us": round(statistics.median(wall) * 1e6, 2),
        "added_cpu_us": round(statistics.median(cpu) * 1e6, 2),
        "guarded_calls_measured": windows,
        "note": "meter windows the guard opened during the guarded blocks"
        + ("" if windows else ": none (the model is not on a GPU the meter reads)"),
    }


def nvml_meter(tiny: bool) -> Meter:
    """A started meter on NVML. Tiny mode hides CUDA devices from torch (CUDA_VISIBLE_DEVICES
    is empty, so nothing runs on a real GPU) and names the fake driver's GPU 0 explicitly."""
    backend = NvmlBackend.probe(visible_devices="0" if tiny else None)
    meter = Meter(Settings(ledger_path=None, sample_hz=10.0, backend="nvml"), backend=backend)
    meter.start().wait_ready(10.0)
    return meter


def run_meter_part(*, on_cuda: bool, tiny: bool, truth: Any = None) -> dict[str, Any]:
    """Part 1, returned as one JSON-ready dict. ``truth(t0, t1)`` gives exact joules (fake)."""
    import pynvml

    zeus, zeus_note = load_zeus(tiny)
    # This part's own NVML reference for the trace and the counter reads, taken after Zeus
    # (a ZeusMonitor that fails to start shuts NVML down; the fake driver does not count inits).
    pynvml.nvmlInit()
    meter = nvml_meter(tiny)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    trace = PowerTrace(pynvml, handle).start()
    work = work_function(on_cuda)
    try:
        runs = measure_windows(
            meter,
            lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0,
            zeus,
            work,
            TINY_WINDOWS if tiny else GPU_WINDOWS,
        )
        time.sleep(0.05)  # the trace gets a sample past the last window's end
        edges = edge_cost_us(meter, 200 if tiny else 2000)
        sampler = meter.sampler
        sampler_figures = {
            "configured_hz": meter.settings.sample_hz,
            "actual_hz": sampler.actual_hz(),
            "samples": sampler.samples,
            "cpu_share_of_one_core": sampler.cpu_fraction(),
            "cpu_us_per_sample": round(sampler.sample_cpu_s / max(1, sampler.samples) * 1e6, 2),
        }
    finally:
        trace.stop()
        meter.stop()
        with contextlib.suppress(pynvml.NVMLError):  # already down on the fake driver
            pynvml.nvmlShutdown()
    for run in runs:
        run.trace_j = trace.energy_j(run.start, run.end)
        run.truth_j = truth(run.start, run.end) if truth is not None else None
    guard = guard_call_overhead(
        on_cuda, calls=3 if tiny else 20, rounds=3 if tiny else 5, tokens=4 if tiny else 8
    )
    return {
        "trace": {"method": trace.method, "actual_hz": trace.actual_hz},
        "zeus": zeus_note,
        "windows": window_table(runs),
        "runs": [vars(run) for run in runs],
        "edge_cost": edges,
        "guard_call": guard,
        "sampler": sampler_figures,
        "reference": "truth (fake driver formula)" if truth is not None else "trace (100 Hz)",
    }


def meter_markdown(part: dict[str, Any]) -> str:
    """The meter table: per window length, each method's median J and difference."""
    head = (
        "| window | n | ecoguard J | trace J | counter J | Zeus J | ecoguard vs trace | "
        "counter vs trace | Zeus vs trace | ecoguard vs Zeus | ecoguard vs truth |"
    )
    lines = [head, "|" + "---|" * 11]

    def cell(value: Any, pct: bool = False) -> str:
        if value is None:
            return "-"
        return f"{value:.2f}%" if pct else f"{value:.3f}"

    for w in part["windows"]:
        lines.append(
            f"| {w['window_s']:g} s | {w['n']} | {cell(w['ecoguard_j'])} | {cell(w['trace_j'])} | "
            f"{cell(w['counter_j'])} | {cell(w['zeus_j'])} | "
            f"{cell(w['ecoguard_vs_trace_pct'], True)} | {cell(w['counter_vs_trace_pct'], True)} | "
            f"{cell(w['zeus_vs_trace_pct'], True)} | {cell(w['ecoguard_vs_zeus_pct'], True)} | "
            f"{cell(w['ecoguard_vs_truth_pct'], True)} |"
        )
    edge, guard, sampler = part["edge_cost"], part["guard_call"], part["sampler"]
    share = sampler["cpu_share_of_one_core"]
    lines += [
        "",
        f"Trace: {part['trace']['method']} at {part['trace']['actual_hz'] or 0:.0f} Hz. "
        f"Zeus: {part['zeus']}.",
        f"Meter window edges (begin + end on GPU 0): {edge['wall_us']:.1f} us wall, "
        f"{edge['cpu_us']:.1f} us CPU per call ({edge['pairs']} pairs).",
        f"Guarded generate vs unguarded ({guard['device']}, {guard['new_tokens']} new tokens): "
        f"{guard['added_wall_us']:+.1f} us wall, {guard['added_cpu_us']:+.1f} us CPU per call "
        f"(median of {guard['rounds']} A/B/A rounds x {guard['calls_per_block']} calls); "
        f"{guard['guarded_calls_measured']} guarded calls measured.",
        f"Sampler thread: {sampler['actual_hz'] or 0:.1f} Hz, {sampler['cpu_us_per_sample']:.0f} us "
        f"CPU per sample, {(share or 0) * 100:.3f}% of one core.",
    ]
    return "\n".join(lines) + "\n"
