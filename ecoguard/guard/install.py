"""``install()`` / ``uninstall()``: the guard's lifecycle, idempotent both ways.

``install`` builds Settings (ECOGUARD_* env, then the arguments on top), patches transformers
through the patch table, starts the meter when ``measure`` is on and the metrics server when a
port is set. ``uninstall`` reverses exactly what ``install`` did: it restores the original
attributes and stops only the meter and server it started itself.

A fork (``os.fork``, multiprocessing's ``fork`` start method, gunicorn ``--preload``) copies the
patches and settings into the child but none of the threads: the meter and the ledger re-arm
themselves there (their own fork hooks). The metrics server stays the parent's: the child never
serves nor stops it, and when the child records something that no metrics endpoint will show, it
says so once (see :func:`_after_fork_in_child`).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from ecoguard import events
from ecoguard.config import Settings
from ecoguard.errors import UsageError
from ecoguard.faults import record_fault
from ecoguard.forking import register_fork_hooks
from ecoguard.guard import patches
from ecoguard.guard.policy import Policy
from ecoguard.guard.wrappers import RUNTIME

_log = logging.getLogger("ecoguard")

_lock = threading.RLock()
_started_meter = False
_started_metrics = False


def _register_fork_hook() -> None:
    """Once per process, from install() (never at import)."""
    register_fork_hooks("guard", after_in_child=_after_fork_in_child)


def _after_fork_in_child() -> None:
    """The child of an installed process: a fresh lock, and the parent's metrics server left
    alone (its thread is not here; stopping it would wait forever for that thread)."""
    global _lock, _started_metrics
    _lock = threading.RLock()
    if not _started_metrics:
        return
    _started_metrics = False
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return  # the worker sink writes this process' counters for the sidecar
    settings = RUNTIME.settings
    port = getattr(settings, "metrics_port", None)
    pid = os.getpid()
    unsubscribe: list[Any] = []

    def warn_once(record: Any) -> None:
        if not unsubscribe:
            return
        unsubscribe.pop()()
        _log.warning(
            "ecoguard: process %d was forked from one serving metrics on port %s; its records "
            "reach the ledger but not /metrics. For multi-process servers set "
            "PROMETHEUS_MULTIPROC_DIR before the workers start and run `ecoguard exporter` "
            "(docs/metrics.md).",
            pid,
            port,
        )

    unsubscribe.append(events.records.subscribe(warn_once))


def _resolve_meter() -> tuple[Any, Any]:
    """(get_meter, CallInfo) from the meter package, or (None, None) when it is absent."""
    try:
        from ecoguard.energy import CallInfo, get_meter
    except ImportError:
        return None, None
    return get_meter, CallInfo


def _resolve_batching() -> tuple[Any, Any]:
    """(coalescing_generate, BATCH_ROWS) from the batching package, or (None, None)."""
    try:
        from ecoguard.batching import BATCH_ROWS, coalescing_generate
    except ImportError:
        return None, None
    return coalescing_generate, BATCH_ROWS


def _start_meter(settings: Settings) -> Any:
    global _started_meter
    try:
        from ecoguard.energy import get_meter, start_meter
    except ImportError:
        return None
    try:
        running = get_meter()
        if running is not None:
            return running
        meter = start_meter(settings)
        _started_meter = True
        return meter
    except Exception as exc:  # no meter is better than no inference
        record_fault("guard.start_meter", exc)
        return None


def _start_metrics(settings: Settings, meter: Any) -> None:
    global _started_metrics
    if settings.metrics_port is None:
        return
    try:
        from ecoguard.export.prometheus import start_metrics_server
    except ImportError as exc:
        record_fault("guard.start_metrics", exc)
        return
    try:
        server = start_metrics_server(settings, meter=meter)
        _started_metrics = _started_metrics or server is not None
    except Exception as exc:
        record_fault("guard.start_metrics", exc)


def _enable_worker_export() -> None:
    """In a multi-worker server (PROMETHEUS_MULTIPROC_DIR set) each worker writes its counters
    for the sidecar `ecoguard exporter` to merge; GPU device metrics come from the sidecar only."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    try:
        from ecoguard.export.prometheus import enable_worker_export

        enable_worker_export()
    except Exception as exc:
        record_fault("guard.worker_export", exc)


def install(
    *,
    mode: str | None = None,
    rules: str | dict[str, str] | None = None,
    measure: bool | None = None,
    metrics_port: int | None = None,
    batching: bool | None = None,
    max_batch_size: int | None = None,
    max_wait_ms: float | None = None,
    settings: Settings | None = None,
    **more: Any,
) -> Settings:
    """Turn the guard on (again): returns the Settings in force.

    ``settings`` replaces the environment as the base; the keyword arguments override either.
    Unknown keywords or bad values raise UsageError. Calling it twice patches once; a second
    call with other arguments updates the settings."""
    overrides = {
        "mode": mode,
        "rules": rules,
        "measure": measure,
        "metrics_port": metrics_port,
        "batching": batching,
        "max_batch_size": max_batch_size,
        "max_wait_ms": max_wait_ms,
        **more,
    }
    overrides = {key: value for key, value in overrides.items() if value is not None}
    unknown = set(overrides) - set(Settings.__dataclass_fields__)
    if unknown:
        raise UsageError(
            f"unknown install() argument(s) {', '.join(sorted(unknown))}; accepted: "
            f"{', '.join(Settings.__dataclass_fields__)}"
        )
    if settings is None:
        settings = Settings.from_env(**overrides)
    else:
        if isinstance(overrides.get("rules"), str):
            from ecoguard.config import parse_rule_overrides

            overrides["rules"] = parse_rule_overrides(overrides["rules"])
        settings = settings.with_(**overrides)
    _register_fork_hook()
    with _lock:
        if RUNTIME.settings != settings or not RUNTIME.active:
            RUNTIME.policy = Policy(settings)
        RUNTIME.settings = settings
        RUNTIME.get_meter, RUNTIME.call_info = _resolve_meter()
        RUNTIME.coalesce, RUNTIME.batch_rows = (
            _resolve_batching() if settings.batching else (None, None)
        )
        RUNTIME.active = True
        patches.apply_patches()
        meter = _start_meter(settings) if settings.measure else None
        _start_metrics(settings, meter)
        _enable_worker_export()
    return settings


def uninstall() -> None:
    """Turn the guard off: original attributes restored, our meter and metrics server stopped.
    Idempotent."""
    global _started_meter, _started_metrics
    with _lock:
        RUNTIME.active = False
        patches.remove_patches()
        RUNTIME.models.clear()
        if _started_metrics:
            _started_metrics = False
            try:
                from ecoguard.export.prometheus import stop_metrics_server

                stop_metrics_server()
            except Exception as exc:
                record_fault("guard.stop_metrics", exc)
        if _started_meter:
            _started_meter = False
            try:
                from ecoguard.energy import stop_meter

                stop_meter()
            except Exception as exc:
                record_fault("guard.stop_meter", exc)
        if RUNTIME.coalesce is not None:
            try:
                from ecoguard.batching import close_all

                close_all()
            except Exception as exc:
                record_fault("guard.stop_batching", exc)
            RUNTIME.coalesce = None
            RUNTIME.batch_rows = None


def is_installed() -> bool:
    """True while the guard is on."""
    return RUNTIME.active


def current_settings() -> Settings | None:
    """The Settings in force while installed, else None."""
    return RUNTIME.settings if RUNTIME.active else None
