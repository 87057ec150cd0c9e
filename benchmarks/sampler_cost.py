"""What the meter costs the serving process: generate throughput with and without it.

    .venv/bin/python benchmarks/sampler_cost.py [--rounds 8] [--json]

A tiny Llama (built from a config, CPU) generates 32 tokens per call. Conditions, interleaved in
shuffled order within each round so drift and machine load hit them alike (A/B in one run):

* ``off``: no meter;
* ``10 Hz`` / ``50 Hz``: the sampler thread reading the fake NVML driver (real pynvml ctypes
  calls) at that rate;
* ``10 Hz + windows``: as 10 Hz, plus ``meter.begin``/``meter.end`` around every call (what the
  guard does).

Reported: tokens/s per condition (median over rounds) and the median per-round slowdown against
``off``. Throughput A/B is only as steady as the machine: on a shared, loaded box it is noise,
so the script also reports the sampler thread's own CPU time as a share of one core (measured
with ``time.thread_time`` inside the thread; load cannot inflate it), the cost of one begin+end
pair (us) and of one counter calibration. Target (issue 4): < 0.5% at 10 Hz. ~60 s.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=3, help="generate calls per block")
    parser.add_argument("--cpu-seconds", type=float, default=4.0, help="per rate, for CPU share")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch
    import transformers

    from ecoguard.config import Settings
    from ecoguard.energy import CallInfo, Meter
    from ecoguard.energy.backends import NvmlBackend
    from ecoguard.testing.fake_nvml import FakeNvmlConfig, build_library, load_in_process
    from ecoguard.testing.models import build_tiny_model

    FakeNvmlConfig(gpus=1).apply()
    load_in_process(build_library(tempfile.mkdtemp(prefix="fake-nvml-")))
    model_dir = build_tiny_model(tempfile.mkdtemp(prefix="tiny-llama-"), "llama")
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    model.eval()
    ids = torch.randint(3, 200, (1, 8), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)

    def generate() -> int:
        out = model.generate(
            ids, attention_mask=mask, max_new_tokens=32, min_new_tokens=32, do_sample=False
        )
        return int(out.shape[1] - ids.shape[1])

    for _ in range(3):
        generate()  # warm up

    def block(condition: str) -> float:
        meter = None
        if condition != "off":
            hz = 50.0 if condition == "50 Hz" else 10.0
            meter = Meter(
                Settings(ledger_path=None, sample_hz=hz),
                backend=NvmlBackend.probe(),
                calibrate=False,
            ).start()
        windows = condition == "10 Hz + windows"
        info = CallInfo(model_name="tiny")
        tokens = 0
        started = time.perf_counter()
        for _ in range(args.calls):
            window = meter.begin(devices=None, info=info) if windows else None
            produced = generate()
            tokens += produced
            if window is not None:
                meter.end(window, tokens=produced, requests=1)
        elapsed = time.perf_counter() - started
        if meter is not None:
            meter.stop()
        return tokens / elapsed

    conditions = ["off", "10 Hz", "50 Hz", "10 Hz + windows"]
    rng = random.Random(0)
    rates: dict[str, list[float]] = {c: [] for c in conditions}
    for _ in range(args.rounds):
        order = conditions[:]
        rng.shuffle(order)
        for condition in order:
            rates[condition].append(block(condition))

    per_round = {
        c: sorted((off - on) / off * 100 for off, on in zip(rates["off"], rates[c], strict=True))
        for c in conditions[1:]
    }
    slowdown = {c: statistics.median(v) for c, v in per_round.items()}
    spread = {c: (v[len(v) // 4], v[(3 * len(v)) // 4]) for c, v in per_round.items()}

    # The sampler thread's own CPU time: a cost figure a loaded machine cannot blur.
    cpu_fraction = {}
    for hz in (10.0, 50.0):
        meter = Meter(Settings(ledger_path=None, sample_hz=hz), backend=NvmlBackend.probe()).start()
        meter.wait_ready(10.0)
        time.sleep(args.cpu_seconds)
        sampler = meter.sampler
        per_sample_us = sampler.sample_cpu_s / max(1, sampler.samples) * 1e6
        cpu_fraction[f"{hz:g} Hz"] = {
            "measured_share": sampler.cpu_fraction(),  # includes the 2 s recalibration
            "per_sample_cpu_us": per_sample_us,
            "steady_share": per_sample_us * 1e-6 * hz,  # sampling alone, recalibrations apart
        }
        meter.stop()

    # Per-call overhead of the edges, and the one-off calibration cost.
    meter = Meter(Settings(ledger_path=None), backend=NvmlBackend.probe(), calibrate=False)
    info = CallInfo(model_name="tiny")
    n = 2000
    started = time.perf_counter()
    for _ in range(n):
        meter.end(meter.begin(devices=None, info=info), tokens=1, requests=1)
    edge_us = (time.perf_counter() - started) / n * 1e6
    track = meter.tracks[0]
    track.read()
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    ok = track.calibrate()
    calibration = {
        "wall_s": time.perf_counter() - wall0,
        "cpu_s": time.thread_time() - cpu0,
        "ok": ok,
    }
    meter.stop()

    result = {
        "tokens_per_s_median": {c: statistics.median(v) for c, v in rates.items()},
        "slowdown_pct_median": slowdown,
        "slowdown_pct_quartiles": spread,
        "off_tokens_per_s_quartiles": (
            sorted(rates["off"])[len(rates["off"]) // 4],
            sorted(rates["off"])[(3 * len(rates["off"])) // 4],
        ),
        "begin_end_pair_us": edge_us,
        "sampler_cpu_fraction_of_one_core": cpu_fraction,
        "calibration": calibration,
        "rounds": args.rounds,
        "calls_per_block": args.calls,
        "torch_threads": torch.get_num_threads(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"tiny Llama on CPU ({torch.get_num_threads()} torch threads), 32 new tokens per call, "
        f"{args.rounds} rounds x {args.calls} calls per condition, fake NVML driver"
    )
    for condition in conditions:
        extra = (
            ""
            if condition == "off"
            else f"   slowdown vs off: {slowdown[condition]:+.2f}% (median of rounds; "
            f"quartiles {spread[condition][0]:+.2f}% .. {spread[condition][1]:+.2f}%)"
        )
        print(f"{condition:>16}: {result['tokens_per_s_median'][condition]:8.1f} tok/s{extra}")
    for name, figures in cpu_fraction.items():
        print(
            f"sampler thread CPU at {name}: {figures['per_sample_cpu_us']:.0f} us per sample -> "
            f"{figures['steady_share'] * 100:.3f}% of one core steady; "
            f"{figures['measured_share'] * 100:.2f}% over the first {args.cpu_seconds:g} s "
            "(incl. the 2 s recalibration)"
        )
    print(f"begin+end pair (1 GPU, fake NVML): {edge_us:.1f} us")
    print(
        f"one counter calibration: {calibration['wall_s'] * 1000:.0f} ms wall, "
        f"{calibration['cpu_s'] * 1000:.1f} ms CPU (at start, then after 2 s, 10 s, every 60 s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
