"""Scrape time of ecoguard's /metrics with 8 GPUs and 20 models (target: under 10 ms).

Builds the collector over a fresh registry, feeds it 20 models (x ``--precisions``) of generation
records and a handful of findings, gives it a meter stand-in with 8 GPUs, and times
``render_text`` (what one scrape costs: collect + text exposition; checked byte-equal to
prometheus_client's ``generate_latest``), plus one real HTTP GET
of the running server. Prints the median and 95th percentile in milliseconds.

    .venv/bin/python benchmarks/scrape_time.py [--iterations 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.request
from dataclasses import dataclass


@dataclass(frozen=True)
class _Record:
    model_name: str
    precision: str
    energy_j: float
    tokens: int
    requests: int
    batch_size: int
    cost_usd: float
    co2_g: float
    reference_j_per_token: float
    reference_tier: str = "measured"
    gpu_names: tuple[str, ...] = ("NVIDIA H100 80GB HBM3",)


@dataclass(frozen=True)
class _GpuState:
    index: int
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    profile: str = "h100_sxm"
    energy_j_total: float = 1.0e6
    power_w: float = 420.0
    idle_w: float = 70.0
    stale: bool = False
    tier: str = "live"
    method: str = "counter"
    faults: int = 0


class _Meter:
    def __init__(self, gpus: int) -> None:
        self._states = [_GpuState(i, f"GPU-{i:032x}") for i in range(gpus)]

    def gpu_states(self) -> list[_GpuState]:
        return list(self._states)

    def stats(self) -> dict:
        return {
            "samples": 1000,
            "sample_hz_actual": 10.0,
            "last_sample_time": 1.7e9,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--precisions", type=int, default=1, help="precisions per model (1-4)")
    args = parser.parse_args()

    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    from ecoguard.config import Settings
    from ecoguard.export.prometheus import (
        EcoguardCollector,
        GenerationAggregates,
        render_text,
        start_metrics_server,
        stop_metrics_server,
    )
    from ecoguard.findings import RULE_IDS

    aggregates = GenerationAggregates()
    for m in range(args.models):
        for precision in ("bf16", "nf4", "int8_pure", "fp8_dynamic")[: args.precisions]:
            for batch_size in (1, 2, 4, 8, 16, 32):
                aggregates.observe_record(
                    _Record(
                        f"org/model-{m:02d}",
                        precision,
                        50.0 * batch_size,
                        256 * batch_size,
                        batch_size,
                        batch_size,
                        1e-5,
                        0.02,
                        0.15,
                    )
                )
    for rule in RULE_IDS:
        for action in ("warn", "fix"):
            aggregates.observe_finding((type("F", (), {"rule": rule, "mood": "orange"})(), action))
    meter = _Meter(args.gpus)
    settings = Settings(metrics_port=0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EcoguardCollector(aggregates=aggregates, meter=meter, settings=settings))

    body = render_text(registry)
    assert body == generate_latest(registry), "render_text differs from prometheus_client"
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    for _ in range(10):  # warm up
        render_text(registry)
    times_ms = []
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        render_text(registry)
        times_ms.append((time.perf_counter() - t0) * 1000)
    times_ms.sort()
    median = statistics.median(times_ms)
    p95 = times_ms[int(0.95 * (len(times_ms) - 1))]

    server = start_metrics_server(settings, meter=meter, aggregates=aggregates)
    http_ms = []
    try:
        assert server is not None
        for _ in range(min(args.iterations, 50)):
            t0 = time.perf_counter()
            with urllib.request.urlopen(server.url, timeout=5) as response:
                response.read()
            http_ms.append((time.perf_counter() - t0) * 1000)
    finally:
        stop_metrics_server()
        aggregates.unsubscribe()

    print(
        f"scrape of {args.gpus} GPUs x {args.models} models x {args.precisions} precision(s) "
        f"({samples} samples, "
        f"{len(body) / 1024:.0f} KiB): collect+encode median {median:.2f} ms, p95 {p95:.2f} ms; "
        f"HTTP GET median {statistics.median(http_ms):.2f} ms (target < 10 ms)"
    )


if __name__ == "__main__":
    main()
