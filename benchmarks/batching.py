"""Coalescing benchmark: threads x requests on CPU with a tiny model, batching off vs on.

Each request is metered the way the guard meters a generate call (one meter window per caller
around its call; the meter shares overlapping windows' energy by time), on the simulated GPU
backend (``Settings(backend="simulated")``: busy power while any window is open, from the
reference rows of the simulated GPU profile). Energy figures are therefore *simulated*: they show
how the attribution responds to batching, not what a real GPU would draw.

Reported per mode: throughput (requests/s, new tokens/s), per-request energy (J, simulated),
latency p50/p99, achieved batch sizes; and the latency a lone caller pays for the wait window.
Generated tokens are checked to be identical with batching on and off.

    .venv/bin/python benchmarks/batching.py [--threads 8] [--requests 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--requests", type=int, default=4, help="requests per thread")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--max-wait-ms", type=float, default=10.0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    import torch
    import transformers

    from ecoguard.batching import (
        BATCH_ROWS,
        batching_stats,
        close_all,
        coalescing_generate,
        reset_batching_stats,
    )
    from ecoguard.config import Settings
    from ecoguard.energy import CallInfo, start_meter, stop_meter
    from ecoguard.guard.tokens import count_generated
    from ecoguard.testing.models import build_tiny_model

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(tmp, "llama")
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    gen = torch.Generator().manual_seed(1)
    total = args.threads * args.requests
    prompts = [torch.randint(3, 256, (1, 4 + (i * 7) % 17), generator=gen) for i in range(total)]
    gen_kwargs = {"max_new_tokens": args.max_new_tokens, "do_sample": False}
    meter = start_meter(Settings(backend="simulated", ledger_path=None, measure=True))

    def run_mode(batching: bool, threads: int, per_thread: int, wait_ms: float) -> dict:
        settings = Settings(
            batching=batching, max_batch_size=args.max_batch_size, max_wait_ms=wait_ms
        )
        reset_batching_stats()
        outputs: dict[int, torch.Tensor] = {}
        latencies_s: list[float] = []
        records = []
        lock = threading.Lock()
        barrier = threading.Barrier(threads)

        def worker(t: int) -> None:
            barrier.wait()
            for k in range(per_thread):
                i = t * per_thread + k
                ids = prompts[i]
                info = CallInfo(
                    model_name="tiny-llama",
                    precision="fp32",
                    batch_size=1,
                    prompt_tokens=int(ids.shape[1]),
                    max_new_tokens=args.max_new_tokens,
                )
                start = time.perf_counter()
                window = meter.begin(devices=None, info=info)
                # As the guard does: the rows of the batch the GPU ran (None when not coalesced)
                # go to meter.end, whose simulated GPU charges each call the time of that batch.
                rows = BATCH_ROWS.set(None)
                try:
                    out = coalescing_generate(
                        model.generate, model, (ids,), dict(gen_kwargs), settings
                    )
                    achieved = BATCH_ROWS.get()
                finally:
                    BATCH_ROWS.reset(rows)
                tokens = count_generated(
                    out, prompt_length=int(ids.shape[1]), eos_token_id=2, pad_token_id=0
                )
                record = meter.end(window, tokens=tokens, requests=1, batch_size=achieved)
                elapsed = time.perf_counter() - start
                with lock:
                    outputs[i] = out
                    latencies_s.append(elapsed)
                    records.append(record)

        pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        wall = time.perf_counter()
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        wall = time.perf_counter() - wall
        close_all()
        stats = batching_stats()
        n = threads * per_thread
        tokens = sum(r.tokens for r in records if r is not None)
        energies = [r.energy_j for r in records if r is not None]
        return {
            "batching": batching,
            "requests": n,
            "wall_s": wall,
            "requests_per_s": n / wall,
            "tokens_per_s": tokens / wall,
            "energy_per_request_j": statistics.mean(energies) if energies else None,
            "energy_total_j": sum(energies) if energies else None,
            "energy_tier": records[0].tier if records and records[0] is not None else None,
            "latency_p50_ms": 1000 * percentile(latencies_s, 50),
            "latency_p99_ms": 1000 * percentile(latencies_s, 99),
            "batch_size_histogram": stats["batch_size_histogram"],
            "mean_batch_size": stats["mean_batch_size"],
            "_outputs": outputs,
        }

    try:
        run_mode(False, 2, 1, args.max_wait_ms)  # warm up kernels and the meter
        off = run_mode(False, args.threads, args.requests, args.max_wait_ms)
        on = run_mode(True, args.threads, args.requests, args.max_wait_ms)
        identical = all(torch.equal(off["_outputs"][i], on["_outputs"][i]) for i in range(total))
        # What a lone caller pays for the wait window: one thread, sequential requests.
        lone_off = run_mode(False, 1, 8, args.max_wait_ms)
        lone_on = run_mode(True, 1, 8, args.max_wait_ms)
    finally:
        stop_meter()
    for result in (off, on, lone_off, lone_on):
        result.pop("_outputs")
    summary = {
        "model": "tiny llama (hidden 64, 2 layers, fp32, CPU)",
        "threads": args.threads,
        "requests_per_thread": args.requests,
        "max_new_tokens": args.max_new_tokens,
        "max_batch_size": args.max_batch_size,
        "max_wait_ms": args.max_wait_ms,
        "tokens_identical": identical,
        "off": off,
        "on": on,
        "throughput_gain": on["requests_per_s"] / off["requests_per_s"],
        "energy_per_request_change_pct": (
            100 * (on["energy_per_request_j"] / off["energy_per_request_j"] - 1)
            if on["energy_per_request_j"] and off["energy_per_request_j"]
            else None
        ),
        "lone_caller_added_latency_p50_ms": lone_on["latency_p50_ms"] - lone_off["latency_p50_ms"],
        "lone_caller": {"off": lone_off, "on": lone_on},
    }
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0 if identical else 1
    print(
        f"{summary['model']}: {args.threads} threads x {args.requests} requests, "
        f"max_new_tokens={args.max_new_tokens}, max_batch_size={args.max_batch_size}, "
        f"max_wait_ms={args.max_wait_ms}"
    )
    print(
        f"{'mode':<6}{'req/s':>9}{'tok/s':>9}{'J/req (sim)':>13}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'mean bs':>9}  batch sizes"
    )
    for name, r in (("off", off), ("on", on)):
        print(
            f"{name:<6}{r['requests_per_s']:>9.1f}{r['tokens_per_s']:>9.0f}"
            f"{r['energy_per_request_j']:>13.2f}{r['latency_p50_ms']:>9.1f}"
            f"{r['latency_p99_ms']:>9.1f}{r['mean_batch_size'] or 1:>9.2f}  "
            f"{r['batch_size_histogram'] or '-'}"
        )
    print(
        f"throughput x{summary['throughput_gain']:.2f}; energy per request "
        f"{summary['energy_per_request_change_pct']:+.1f}% (simulated tier); "
        f"tokens identical: {identical}"
    )
    print(
        f"lone caller (1 thread): p50 {lone_off['latency_p50_ms']:.1f} ms off, "
        f"{lone_on['latency_p50_ms']:.1f} ms on "
        f"(+{summary['lone_caller_added_latency_p50_ms']:.1f} ms: the wait window)"
    )
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
