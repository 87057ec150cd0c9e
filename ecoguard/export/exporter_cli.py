"""``ecoguard exporter``: a standalone sidecar that samples every GPU and serves its metrics.

Why a sidecar: a gunicorn/uvicorn server runs several worker processes on the same GPUs. If each
worker exported ``ecoguard_gpu_energy_joules_total`` the fleet's energy would be counted once per
worker. The sidecar reads each GPU once and serves the device metrics; workers write only their
tokens and attributed energy to prometheus_client's multiprocess files
(``PROMETHEUS_MULTIPROC_DIR``), which the sidecar merges into the same scrape. One target per
host, no double counting. See docs/metrics.md.

This module stays light at import: prometheus_client is imported by the handler only.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
from typing import Any

from ecoguard import energy
from ecoguard.config import Settings
from ecoguard.errors import BackendError, UsageError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "exporter",
        help="serve GPU energy metrics for Prometheus (sidecar for multi-worker servers)",
        description=(
            "Sample every visible GPU and serve ecoguard's device metrics on /metrics. With "
            "--multiproc-dir (or PROMETHEUS_MULTIPROC_DIR), also serve the merged counters that "
            "worker processes wrote there. Runs until interrupted (Ctrl-C or SIGTERM)."
        ),
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="port to listen on (default: ECOGUARD_METRICS_PORT, else 9464; 0 picks a free one)",
    )
    parser.add_argument(
        "--addr",
        default=None,
        help=(
            "address to bind (default: ECOGUARD_METRICS_ADDR, else 127.0.0.1); every interface "
            "only when written 0.0.0.0 or :: (shorthands such as 0 are refused), and only behind "
            "a firewall: the metrics reveal models and load"
        ),
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help=(
            "connections served at once, one thread each; more wait in the listen backlog "
            "(default: ECOGUARD_METRICS_MAX_CONNECTIONS, else 64; 1-4096)"
        ),
    )
    parser.add_argument(
        "--backend",
        choices=("auto", "nvml", "simulated", "null"),
        default=None,
        help="power backend (default: ECOGUARD_BACKEND, else auto)",
    )
    parser.add_argument(
        "--sample-hz", type=float, default=None, help="sampler rate in Hz (default 10)"
    )
    parser.add_argument(
        "--multiproc-dir",
        default=None,
        help=(
            "directory of the workers' prometheus_client multiprocess files to merge "
            "(default: PROMETHEUS_MULTIPROC_DIR when set)"
        ),
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="print one scrape to stdout and exit instead of serving",
    )
    parser.set_defaults(func=run_exporter)


def build_registry(settings: Any, meter: Any, multiproc_dir: str | None) -> Any:
    """The sidecar's registry: device metrics from ``meter``, plus the workers' merged counters
    when ``multiproc_dir`` is given. No generation aggregates of its own: the sidecar serves no
    generate calls."""
    from prometheus_client import CollectorRegistry

    from ecoguard.export.prometheus import EcoguardCollector  # lazy: prometheus_client
    from ecoguard.export.prometheus.multiprocess import WorkerFilesCollector  # lazy: same

    registry = CollectorRegistry(auto_describe=False)
    registry.register(EcoguardCollector(aggregates=None, meter=meter, settings=settings))
    if multiproc_dir is not None:
        WorkerFilesCollector(registry, path=multiproc_dir)
    return registry


def _check_address(addr: str, port: int, source: str) -> None:
    """UsageError for an address that cannot be bound whatever the port: bytes that are not a
    host name, or a name that does not resolve (the bind error read 'pick another port')."""
    try:
        socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, ValueError, TypeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise UsageError(
            f"{source} {addr!r} is not an address this machine can listen on ({reason}); give "
            "an IP address such as 127.0.0.1, ::1 or 0.0.0.0, or a host name that resolves"
        ) from None


def run_exporter(args: argparse.Namespace) -> int:
    settings = Settings.from_env(
        backend=args.backend,
        sample_hz=args.sample_hz,
        metrics_addr=args.addr,
        metrics_max_connections=args.max_connections,
    )
    port = args.port if args.port is not None else settings.metrics_port
    port = 9464 if port is None else port
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be 0 to 65535, got {port}")
    # The sidecar serves no generate calls, so it keeps no ledger (the workers do): no database
    # file or writer thread of its own, and its config_info says ledger="off".
    settings = settings.with_(metrics_port=port, ledger_path=None)
    multiproc_dir = args.multiproc_dir or os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
    if multiproc_dir is not None and not os.path.isdir(multiproc_dir):
        raise UsageError(
            f"multiprocess directory {multiproc_dir!r} does not exist; create it (empty) before "
            "starting the workers and the exporter, and pass the same path to both"
        )
    _check_address(settings.metrics_addr, port, "--addr" if args.addr else "ECOGUARD_METRICS_ADDR")
    try:
        # The meter only: the sidecar keeps no ledger (ledger_path is None above).
        meter = energy.start_meter(settings)
    except BackendError as exc:
        # Asked for NVML where there is no driver (or the GPU is gone): a failed check, not a
        # traceback. auto falls back to the simulated backend by itself.
        print(
            f"ecoguard exporter: the {settings.backend} power backend is not available: {exc}. "
            "Check the NVIDIA driver (nvidia-smi), or use --backend auto (falls back when no "
            "GPU answers) or --backend simulated to try the exporter without a GPU.",
            file=sys.stderr,
        )
        return 1
    try:
        registry = build_registry(settings, meter, multiproc_dir)
        from ecoguard.export import prometheus  # lazy: prometheus_client

        if args.once:
            sys.stdout.write(prometheus.render_text(registry).decode("utf-8"))
            return 0
        try:
            server = prometheus.serve_registry(
                settings.metrics_addr,
                port,
                registry,
                max_connections=settings.metrics_max_connections,
            )
        except OSError as exc:
            print(
                f"ecoguard: cannot listen on {settings.metrics_addr}:{port}: "
                f"{exc.strerror or exc}. Pick another --port (0 chooses a free one).",
                file=sys.stderr,
            )
            return 1
        stop = threading.Event()

        def on_signal(signum: int, frame: object) -> None:
            stop.set()

        previous = signal.signal(signal.SIGTERM, on_signal)
        print(f"ecoguard exporter: serving {server.url}", file=sys.stderr, flush=True)
        try:
            while not stop.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            server.stop()
        return 0
    finally:
        energy.stop_meter()
