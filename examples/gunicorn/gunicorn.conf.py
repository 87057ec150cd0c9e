"""gunicorn settings for the guarded app, with ecoguard's sidecar exporter beside it.

    gunicorn -c examples/gunicorn/gunicorn.conf.py --chdir examples/gunicorn app:application
    ecoguard exporter --port 9464   # in another shell (or a second container/service)

Each worker turns the guard on after the fork and writes its counters (tokens, attributed energy,
findings) to prometheus_client's multiprocess directory; the exporter samples every GPU once and
serves those counters merged, so Prometheus scrapes one target per host and no GPU is counted
once per worker. Both processes must see the same PROMETHEUS_MULTIPROC_DIR.
"""

from __future__ import annotations

import os
import shutil
import tempfile

bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WORKERS", "2"))
timeout = 120  # a cold worker loads a model before its first answer
preload_app = False  # each worker loads its own model after the fork (no torch state across fork)

# prometheus_client chooses its value store when it is first imported, so the directory must be
# in the environment before any worker starts; the workers inherit it from this master process.
multiproc_dir = os.environ.setdefault(
    "PROMETHEUS_MULTIPROC_DIR", os.path.join(tempfile.gettempdir(), "ecoguard-gunicorn-metrics")
)
# One math thread per worker, so N workers do not fight over the same cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def on_starting(server) -> None:
    """Start each deploy with an empty metrics directory, as prometheus_client asks."""
    shutil.rmtree(multiproc_dir, ignore_errors=True)
    os.makedirs(multiproc_dir, exist_ok=True)


def post_fork(server, worker) -> None:
    """In the worker, before the app is imported: guard on, counters to the shared directory."""
    import ecoguard

    # The sidecar serves /metrics for every worker; N workers binding one port would fail.
    os.environ.pop("ECOGUARD_METRICS_PORT", None)
    # With PROMETHEUS_MULTIPROC_DIR set (above), install() also turns on the worker export with
    # its Settings: counters to the shared directory, every rule's finding series from 0.
    ecoguard.install()


def child_exit(server, worker) -> None:
    """Let prometheus_client drop a dead worker's live gauges (its counters keep counting)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
