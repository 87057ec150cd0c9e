"""Prometheus metrics: live joules, watts, tokens, dollars and CO2 next to the reference.

Nothing runs at import, and this package is the only part of ecoguard that imports
``prometheus_client``. Every metric family is declared once, in :mod:`.spec` (``METRICS``:
name, kind, HELP, labels, buckets); every path that emits one reads that row.

- :mod:`.facts`: what one generation record or finding adds, checked once (bad figures
  skipped), and the bounded ``model_name`` label.
- :mod:`.aggregates`: :class:`GenerationAggregates` subscribes to ``ecoguard.events`` and keeps
  running totals per (model, precision, GPU name); typed snapshots for the collector.
- :mod:`.collector`: :class:`EcoguardCollector` builds the families at scrape time from the
  aggregates, the meter's per-GPU snapshot, the fault counters and the live settings.
- :mod:`.multiprocess`: :func:`enable_worker_export` for gunicorn/uvicorn workers
  (``PROMETHEUS_MULTIPROC_DIR``); the ``ecoguard exporter`` sidecar merges their files.
- :mod:`.text`: :func:`render_text`, the text exposition at a fraction of the client's cost.
- :mod:`.server`: :func:`start_metrics_server` serves ``/metrics`` from a named daemon thread.

Metric names, units and labels follow ARCHITECTURE.md ("Metric names"). Joules per token is not
exported as a gauge: it is the recording rule ``rate(energy) / rate(tokens)`` in
grafana/prometheus/ecoguard-rules.yml. See docs/metrics.md.
"""

from __future__ import annotations

from ecoguard.export.prometheus.aggregates import GenerationAggregates
from ecoguard.export.prometheus.collector import NO_METER, EcoguardCollector
from ecoguard.export.prometheus.multiprocess import disable_worker_export, enable_worker_export
from ecoguard.export.prometheus.server import (
    MetricsServer,
    get_metrics_server,
    process_aggregates,
    serve_registry,
    start_metrics_server,
    stop_metrics_server,
)
from ecoguard.export.prometheus.text import render_text

# The names other packages, tests and examples import from here; everything else is imported
# from the module that defines it.
__all__ = [
    "NO_METER",
    "EcoguardCollector",
    "GenerationAggregates",
    "MetricsServer",
    "disable_worker_export",
    "enable_worker_export",
    "get_metrics_server",
    "process_aggregates",
    "render_text",
    "serve_registry",
    "start_metrics_server",
    "stop_metrics_server",
]
