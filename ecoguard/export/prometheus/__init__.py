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

from ecoguard.export.prometheus.aggregates import (
    AggregateSnapshot,
    GenerationAggregates,
    GenerationTotals,
    Histogram,
    Reference,
)
from ecoguard.export.prometheus.collector import (
    EcoguardCollector,
    MeterSource,
    MeterView,
    SettingsSource,
    config_labels,
)
from ecoguard.export.prometheus.facts import (
    DEFAULT_MAX_MODELS,
    OTHER,
    UNKNOWN,
    RecordFacts,
    batching_saved_energy_j,
)
from ecoguard.export.prometheus.multiprocess import (
    WorkerSink,
    disable_worker_export,
    enable_worker_export,
    multiprocess_dir,
)
from ecoguard.export.prometheus.server import (
    DEFAULT_PORT,
    LISTEN_BACKLOG,
    MAX_DISCARDED_BODY_BYTES,
    MetricsServer,
    get_metrics_server,
    process_aggregates,
    serve_registry,
    start_metrics_server,
    stop_metrics_server,
)
from ecoguard.export.prometheus.spec import (
    BATCH_SIZE_BUCKETS,
    FINDING_LABELS,
    GENERATION_LABELS,
    GPU_LABELS,
    METRICS,
    REQUEST_ENERGY_BUCKETS_J,
    MetricSpec,
)
from ecoguard.export.prometheus.text import render_text

__all__ = [
    "BATCH_SIZE_BUCKETS",
    "DEFAULT_MAX_MODELS",
    "DEFAULT_PORT",
    "FINDING_LABELS",
    "GENERATION_LABELS",
    "GPU_LABELS",
    "LISTEN_BACKLOG",
    "MAX_DISCARDED_BODY_BYTES",
    "METRICS",
    "OTHER",
    "REQUEST_ENERGY_BUCKETS_J",
    "UNKNOWN",
    "AggregateSnapshot",
    "EcoguardCollector",
    "GenerationAggregates",
    "GenerationTotals",
    "Histogram",
    "MeterSource",
    "MeterView",
    "MetricSpec",
    "MetricsServer",
    "RecordFacts",
    "Reference",
    "SettingsSource",
    "WorkerSink",
    "batching_saved_energy_j",
    "config_labels",
    "disable_worker_export",
    "enable_worker_export",
    "get_metrics_server",
    "multiprocess_dir",
    "process_aggregates",
    "render_text",
    "serve_registry",
    "start_metrics_server",
    "stop_metrics_server",
]
