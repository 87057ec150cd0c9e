"""The process-wide services, started and stopped by one owner: ledger, meter, metrics server.

The composition root of ecoguard's back half. :func:`start_services` starts what the Settings
ask for and is not running yet, and returns a :class:`Services` record of what *it* started;
:meth:`Services.stop` stops exactly that, in reverse order. ``install()`` keeps one such record
for the guard; the vLLM plugin, the demo and ``ecoguard.measure`` use the same function, so
"who started what" lives in the record, not in flags spread over the layers below.

Layering: the meter (``ecoguard.energy``) knows nothing of the ledger or of the metrics
(``ecoguard.export``); this module, above both, wires them. Order of start: the ledger first (so
the first record has somewhere to go), then the meter, then the metrics server; of stop: the
metrics server, the meter, then the ledger (last, so it writes the records of calls that were
still ending).

A fork copies the record into the child; the meter and the ledger re-arm themselves there (their
own fork hooks), the metrics server stays the parent's (see :meth:`Services.forget_metrics`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ecoguard import energy
from ecoguard.config import Settings
from ecoguard.energy.measure import Measurement
from ecoguard.energy.measure import measure as measure_with
from ecoguard.energy.meter import Meter
from ecoguard.export import ledger as ledger_module
from ecoguard.export.ledger import Ledger
from ecoguard.faults import contained


@dataclass(slots=True)
class Services:
    """What one owner started (None: off, failed, or already running under another owner).

    ``stage`` prefixes the fault counted when a part fails to start or stop (``guard`` gives
    ``guard.start_meter``, ``guard.stop_metrics``...)."""

    ledger: Ledger | None = None
    meter: Meter | None = None
    metrics: Any = None  # a MetricsServer; export.prometheus is imported only when metrics are on
    stage: str = "services"

    def stop(self) -> None:
        """Stop what this record started, metrics server first and ledger last. Idempotent;
        a part that fails to stop is counted as a fault and the others are still stopped."""
        metrics, meter, ledger = self.metrics, self.meter, self.ledger
        self.metrics = self.meter = self.ledger = None
        if metrics is not None:
            with contained(f"{self.stage}.stop_metrics"):
                from ecoguard.export import prometheus  # lazy: prometheus_client

                prometheus.stop_metrics_server()
        if meter is not None:
            with contained(f"{self.stage}.stop_meter"):
                energy.stop_meter()
        if ledger is not None:
            with contained(f"{self.stage}.stop_ledger"):
                ledger_module.stop_ledger()  # writes what is queued first

    def forget_metrics(self) -> bool:
        """In a forked child: drop the parent's metrics server without stopping it (its thread
        is not here; stopping it would wait forever for that thread). True when there was one."""
        had, self.metrics = self.metrics is not None, None
        return had


def start_services(
    settings: Settings, *, owned: Services | None = None, stage: str = "services"
) -> Services:
    """Start what ``settings`` ask for and is not running yet; returns ``owned`` (or a new
    record) with what this call started added to it.

    With ``settings.measure``: the ledger at ``settings.ledger_path`` (unless None or one runs)
    and the meter (unless one runs; a meter that cannot start, a missing NVML driver say, is a
    counted fault and the ledger started for it is stopped again). With ``settings.metrics_port``
    set: the metrics server (a running one is updated and returned by
    ``start_metrics_server``, and owned from then on, as ``install()`` always did). With
    ``PROMETHEUS_MULTIPROC_DIR`` set: this worker's counters written for the sidecar exporter.
    Never raises for a part that fails: metrics and records are extras, never a reason for the
    application to stop."""
    services = owned if owned is not None else Services(stage=stage)
    if settings.measure:
        _start_ledger_and_meter(settings, services)
    if settings.metrics_port is not None:
        with contained(f"{services.stage}.start_metrics"):
            from ecoguard.export import prometheus  # lazy: prometheus_client

            meter = energy.get_meter() if settings.measure else None  # None: read at each scrape
            server = prometheus.start_metrics_server(settings, meter=meter)
            if server is not None:
                services.metrics = server
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Each worker of a multi-worker server writes its counters for the sidecar `ecoguard
        # exporter` to merge; GPU device metrics come from the sidecar only.
        with contained(f"{services.stage}.worker_export"):
            from ecoguard.export import prometheus  # lazy: prometheus_client

            prometheus.enable_worker_export(settings=settings)
    return services


def _start_ledger_and_meter(settings: Settings, services: Services) -> None:
    new_ledger = None
    if settings.ledger_path is not None and ledger_module.get_ledger() is None:
        with contained(f"{services.stage}.start_ledger"):
            new_ledger = ledger_module.start_ledger(settings)
    if energy.get_meter() is None:
        with contained(f"{services.stage}.start_meter"):
            services.meter = energy.start_meter(settings)
    if new_ledger is None:
        return
    if energy.get_meter() is None:  # no meter, no records: no writer thread for nothing
        with contained(f"{services.stage}.stop_ledger"):
            ledger_module.stop_ledger()
        return
    services.ledger = new_ledger


@contextmanager
def measure(label: str | None = None, *, meter: Meter | None = None) -> Iterator[Measurement]:
    """``with ecoguard.measure("label") as m:`` (see :mod:`ecoguard.energy.measure`).

    When no meter runs (and none is given), entering the block starts the services from the
    environment's settings first: the meter and the ledger its records go to, running for the
    rest of the process."""
    if meter is None and energy.get_meter() is None:
        _start_ledger_and_meter(Settings.from_env(), Services(stage="measure"))
    with measure_with(label, meter=meter) as measurement:
        yield measurement
