"""Ledger throughput: records/s written to SQLite, and what ``submit`` costs the caller.

    .venv/bin/python benchmarks/ledger_throughput.py [--records 100000] [--json]

Publishes GenerationRecords on ``ecoguard.events.records`` from one thread as fast as it can (the
ledger subscribed, as in a live process) with a queue large enough to hold them all, then waits for
the writer. Reported: enqueue latency percentiles (us, per record, on the publishing thread),
end-to-end records/s until everything is on disk, and drops. A second run with a small queue
shows drops being counted instead of the publisher blocking. ~10 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def _record(i: int):
    from ecoguard.energy import GenerationRecord

    return GenerationRecord(
        start_monotonic=float(i), end_monotonic=i + 0.5, timestamp=time.time(), duration_s=0.5,
        energy_j=120.0, tokens=64, requests=1, batch_size=1, prompt_tokens=32, model_name="bench-7b",
        precision="fp16", gpu_names=("NVIDIA A800-SXM4-80GB",), gpu_indices=(0,), tier="live",
        cost_usd=4e-6, co2_g=0.013, joules_per_token=1.875, reference_j_per_token=1.6,
        reference_tier="measured", label=None, gpu_uuids=("GPU-0",), method="counter_edge_corrected",
    )  # fmt: skip


def run(n: int, queue_size: int, directory: Path) -> dict:
    from ecoguard import events
    from ecoguard.export.ledger import Ledger, read_rows

    records = [_record(i) for i in range(n)]
    ledger = Ledger(directory / f"ledger-{queue_size}.sqlite", queue_size=queue_size).start()
    latencies = []
    started = time.perf_counter()
    for record in records:
        t0 = time.perf_counter_ns()
        events.records.publish(record)
        latencies.append(time.perf_counter_ns() - t0)
    published = time.perf_counter() - started
    ledger.flush(120.0)
    total = time.perf_counter() - started
    ledger.stop()
    latencies.sort()
    rows = len(read_rows(ledger.path))
    return {
        "records": n,
        "queue_size": queue_size,
        "written": ledger.written,
        "dropped": ledger.dropped,
        "rows_on_disk": rows,
        "records_per_s_to_disk": ledger.written / total,
        "publish_s": published,
        "enqueue_us_p50": latencies[len(latencies) // 2] / 1000,
        "enqueue_us_p99": latencies[int(len(latencies) * 0.99)] / 1000,
        "enqueue_us_max": latencies[-1] / 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="ecoguard-ledger-bench-"))
    results = [run(args.records, args.records, directory), run(args.records // 5, 1000, directory)]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for r in results:
        print(
            f"queue {r['queue_size']:>7}: {r['records']} records -> {r['written']} written "
            f"({r['rows_on_disk']} rows on disk), {r['dropped']} dropped; "
            f"{r['records_per_s_to_disk']:,.0f} records/s to disk; enqueue p50 "
            f"{r['enqueue_us_p50']:.1f} us, p99 {r['enqueue_us_p99']:.1f} us, max {r['enqueue_us_max']:.0f} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
