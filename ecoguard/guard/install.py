"""``install()`` / ``uninstall()``: the guard's lifecycle, idempotent both ways.

``install`` builds Settings (ECOGUARD_* env, then the arguments on top), patches transformers
through the patch table and starts the services the settings ask for through the composition
root (:func:`ecoguard.services.start_services`): the ledger and the meter when ``measure`` is on,
the metrics server when a port is set. What it started is kept in one :class:`Services` record;
``uninstall`` restores the original attributes and stops exactly what that record holds, in
reverse order.

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

from ecoguard import energy, events
from ecoguard.batching import BATCH_ROWS, close_all, coalescing_generate
from ecoguard.config import Settings, parse_rule_overrides
from ecoguard.errors import UsageError
from ecoguard.faults import contained
from ecoguard.forking import register_fork_hooks
from ecoguard.guard import patches
from ecoguard.guard.policy import Policy
from ecoguard.guard.wrappers import RUNTIME
from ecoguard.services import Services, start_services

_log = logging.getLogger("ecoguard")

_lock = threading.RLock()
# What install() started (meter, ledger, metrics server): uninstall() stops exactly that.
_services = Services(stage="guard")


def _register_fork_hook() -> None:
    """Once per process, from install() (never at import)."""
    register_fork_hooks("guard", after_in_child=_after_fork_in_child)


def _after_fork_in_child() -> None:
    """The child of an installed process: a fresh lock, and the parent's metrics server left
    alone (its thread is not here; stopping it would wait forever for that thread)."""
    global _lock
    _lock = threading.RLock()
    if not _services.forget_metrics():
        return
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
    The named keywords' None means "not given"; any other Settings field passed as None is set
    to None (``ledger_path=None``: no ledger, as ``Settings(ledger_path=None)`` reads).
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
    unknown = set(more) - set(Settings.__dataclass_fields__)
    if unknown:
        raise UsageError(
            f"unknown install() argument(s) {', '.join(sorted(unknown))}; accepted: "
            f"{', '.join(Settings.__dataclass_fields__)}"
        )
    if settings is None:
        settings = Settings.from_env(**overrides)
    else:
        if isinstance(overrides.get("rules"), str):
            overrides["rules"] = parse_rule_overrides(overrides["rules"])
        settings = settings.with_(**overrides)
    cleared = {key: None for key, value in more.items() if value is None}
    if cleared:  # explicit None (it left the default ledger on before)
        settings = settings.with_(**cleared)
    _register_fork_hook()
    with _lock:
        if RUNTIME.settings != settings or not RUNTIME.active:
            RUNTIME.policy = Policy(settings)
        RUNTIME.settings = settings
        RUNTIME.meter_slot, RUNTIME.call_info = energy.PROCESS_METER, energy.CallInfo
        RUNTIME.coalesce, RUNTIME.batch_rows = (
            (coalescing_generate, BATCH_ROWS) if settings.batching else (None, None)
        )
        RUNTIME.active = True
        patches.apply_patches()
        start_services(settings, owned=_services)
    return settings


def uninstall() -> None:
    """Turn the guard off: original attributes restored, the services install() started stopped
    (metrics server, meter, then ledger). Idempotent."""
    with _lock:
        RUNTIME.active = False
        patches.remove_patches()
        RUNTIME.models.clear()
        _services.stop()
        if RUNTIME.coalesce is not None:
            with contained("guard.stop_batching"):
                close_all()
            RUNTIME.coalesce = None
            RUNTIME.batch_rows = None


def is_installed() -> bool:
    """True while the guard is on."""
    return RUNTIME.active


def current_settings() -> Settings | None:
    """The Settings in force while installed, else None."""
    return RUNTIME.settings if RUNTIME.active else None
