"""Multi-worker servers (gunicorn/uvicorn): each worker writes its counters to files.

With ``PROMETHEUS_MULTIPROC_DIR`` set before the worker starts, :func:`enable_worker_export`
makes the worker write what its generate calls add (the METRICS rows whose values come from
records and findings) to prometheus_client's multiprocess files. The ``ecoguard exporter``
sidecar merges them at scrape time beside the GPU metrics it samples once per GPU. The families,
HELP texts, labels and buckets are the same rows the in-process collector uses. See
docs/metrics.md.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from ecoguard import events
from ecoguard.config import Settings
from ecoguard.energy import GenerationRecord
from ecoguard.export.prometheus.facts import (
    DEFAULT_MAX_MODELS,
    OTHER,
    FindingEventInput,
    GenerationKey,
    ModelLabels,
    RecordFacts,
    finding_key,
    zero_finding_keys,
)
from ecoguard.export.prometheus.spec import (
    CALL_METRICS,
    FINDINGS,
    FOLDED_MODELS,
    REFERENCE,
    WORKER_METRICS,
    MetricSpec,
)
from ecoguard.faults import record_fault

_log = logging.getLogger("ecoguard.metrics")

# prometheus_client's Histogram has no weighted observe: energy per request is observed once per
# request, capped so that a huge batch cannot stall the caller (the in-process path weights
# exactly).
MAX_OBSERVATIONS_PER_CALL = 1024


def multiprocess_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR`` when it names an existing directory, else None."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return path if path and os.path.isdir(path) else None


def _rows(kind: str) -> tuple[MetricSpec, ...]:
    return tuple(spec for spec in WORKER_METRICS if spec.kind == kind)


@dataclass(slots=True)
class _KeySeries:
    """One (model_name, precision, gpu_name) key's per-call series in this worker."""

    counters: dict[str, Counter]
    histograms: dict[str, Histogram]


class WorkerSink:
    """Writes records and findings into prometheus_client's multiprocess files.

    Each worker process owns its own mmap files; the sidecar's ``MultiProcessCollector`` adds
    the counters of all workers (live and dead) at scrape time. Metric objects live in a private
    registry so they never appear twice in an in-process scrape. A key's per-call series are all
    created (at 0) with its first call, as the in-process aggregates show them; a sparse one
    with its first value. With ``settings``, every finding series those settings allow starts
    at 0, as the in-process collector creates them.
    """

    def __init__(
        self, *, max_models: int = DEFAULT_MAX_MODELS, settings: Settings | None = None
    ) -> None:
        registry = CollectorRegistry(auto_describe=False)
        self._labels = ModelLabels(max_models)
        self.max_models = max_models
        self.counters = {
            s.name: Counter(s.name, s.help, s.labels, registry=registry) for s in _rows("counter")
        }
        self.histograms = {
            s.name: Histogram(s.name, s.help, s.labels, buckets=s.buckets, registry=registry)
            for s in _rows("histogram")
        }
        # Gauges carry their merge mode: the sidecar cannot add up a "latest value".
        self.gauges = {
            s.name: Gauge(
                s.name, s.help, s.labels, multiprocess_mode=s.multiprocess_mode, registry=registry
            )
            for s in _rows("gauge")
        }
        self._series: dict[GenerationKey, _KeySeries] = {}
        self._folded = 0
        if settings is not None:
            for key in zero_finding_keys(settings):
                self.counters[FINDINGS.name].labels(*key)

    def _series_of(self, key: GenerationKey) -> _KeySeries:
        series = self._series.get(key)
        if series is None:
            dense = [spec.name for spec in CALL_METRICS if not spec.sparse]
            series = self._series[key] = _KeySeries(
                counters={n: self.counters[n].labels(*key) for n in dense if n in self.counters},
                histograms={n: self.histograms[n].labels(*key) for n in self.histograms},
            )
        return series

    def observe_record(self, record: GenerationRecord) -> None:
        facts = RecordFacts.of(record)
        key = self._labels.key(record)
        series = self._series_of(key)
        for spec, value in facts.counter_increments():
            counter = series.counters.get(spec.name)
            if counter is None:  # a sparse counter's first value
                counter = series.counters[spec.name] = self.counters[spec.name].labels(*key)
            counter.inc(value)
        for spec, value, weight in facts.observations():
            histogram = series.histograms[spec.name]
            for _ in range(min(int(weight), MAX_OBSERVATIONS_PER_CALL)):
                histogram.observe(value)
        if facts.reference_j_per_token is not None and key[0] != OTHER:
            reference = self.gauges[REFERENCE.name].labels(*key, facts.reference_tier)
            reference.set(facts.reference_j_per_token)
        folded = self._labels.folded
        if folded != self._folded:
            self._folded = folded
            self.gauges[FOLDED_MODELS.name].set(folded)

    def observe_finding(self, event: FindingEventInput) -> None:
        self.counters[FINDINGS.name].labels(*finding_key(event)).inc()


_worker_lock = threading.Lock()
_worker_unsubscribers: list[Callable[[], None]] = []


def enable_worker_export(
    *, max_models: int = DEFAULT_MAX_MODELS, settings: Settings | None = None
) -> bool:
    """In a multi-worker server, write this worker's counters to ``PROMETHEUS_MULTIPROC_DIR``.

    ``settings`` (the worker's live Settings): its enabled rules' finding series start at 0, so
    a rule's first firing shows in increase() on the sidecar too.

    Returns False (and does nothing) when the variable is unset or was set only after
    prometheus_client was imported (its value class is chosen at import, so such a worker would
    keep its counters in memory, invisible to the sidecar). Idempotent.
    """
    if multiprocess_dir() is None:
        return False
    if not getattr(values.ValueClass, "_multiprocess", True):
        _log.error(
            "ecoguard: PROMETHEUS_MULTIPROC_DIR was set after prometheus_client was imported; "
            "set it in the environment before the worker starts (see docs/metrics.md)"
        )
        return False
    with _worker_lock:
        if _worker_unsubscribers:
            return True
        sink = WorkerSink(max_models=max_models, settings=settings)
        _worker_unsubscribers.extend(
            [
                events.records.subscribe(sink.observe_record),
                events.findings.subscribe(sink.observe_finding),
            ]
        )
    return True


def disable_worker_export() -> None:
    with _worker_lock:
        unsubscribers = list(_worker_unsubscribers)
        _worker_unsubscribers.clear()
    for unsubscribe in unsubscribers:
        unsubscribe()


def relock_after_fork() -> None:
    """A fresh lock in a forked child (a parent thread may have held it at the fork)."""
    global _worker_lock
    _worker_lock = threading.Lock()


class WorkerFilesCollector(MultiProcessCollector):
    """The sidecar's merge of the workers' files, one damaged file skipped, never the scrape.

    prometheus_client's collector raises on an empty or damaged ``*.db`` file (a worker killed
    while creating it, a full disk, a stray file), which made every scrape a 500, GPU metrics
    included, with nothing logged. Here the files are merged together as before; when that
    fails, each is tried alone and the unreadable ones are left out, each logged once (and
    counted as fault ``metrics.worker_file``) per damaged state of the file."""

    def __init__(self, registry: CollectorRegistry | None, path: str) -> None:
        self._reported: set[tuple[str, int, int]] = set()
        super().__init__(registry, path=path)

    def collect(self) -> Iterable[Metric]:
        files = sorted(glob.glob(os.path.join(self._path, "*.db")))
        try:
            return self.merge(files, accumulate=True)
        except Exception:
            readable = [path for path in files if self._readable(path)]
        try:
            return self.merge(readable, accumulate=True)
        except Exception as exc:  # files readable alone that cannot be merged together
            record_fault("metrics.worker_file", exc)
            return []

    def _readable(self, path: str) -> bool:
        try:
            self.merge([path], accumulate=True)
            return True
        except Exception as exc:
            self._report(path, exc)
            return False

    def _report(self, path: str, exc: Exception) -> None:
        try:
            stat = os.stat(path)
            state = (path, stat.st_size, stat.st_mtime_ns)
        except OSError:
            return  # gone since the listing (a worker's file removed): nothing to report
        if state in self._reported:
            return
        self._reported.add(state)
        record_fault("metrics.worker_file", exc)
        _log.error(
            "ecoguard: skipping the damaged worker metrics file %s (%d bytes: %s); the other "
            "workers' counters are still served. Remove it once its worker has stopped.",
            path,
            stat.st_size,
            exc.__class__.__name__ if not str(exc) else f"{exc.__class__.__name__}: {exc}",
        )
