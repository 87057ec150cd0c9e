"""``ecoguard report``: the subcommand's arguments and its handler.

Its imports are light (the report reads the SQLite ledger with the standard library), so the
CLI can import this module to build its parser without slowing down other subcommands.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import Any

from ecoguard.config import Settings
from ecoguard.errors import UsageError
from ecoguard.export.report import build_report, parse_since, render_text


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report",
        help="energy, cost, CO2 and J/token recorded in the ledger",
        description=(
            "Summarise the generate calls ecoguard measured: energy (kWh), cost ($), CO2 (g), "
            "tokens and joules per token measured beside the reference for the same configuration."
        ),
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        help="only calls since WHEN: 7d, 24h, 30m, 2w, or a local date 2026-11-01[T08:00]",
    )
    parser.add_argument("--by", choices=("model", "day", "gpu"), default="model", help="grouping")
    parser.add_argument("--ledger", metavar="PATH", help="ledger file (default: ECOGUARD_LEDGER)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    since = parse_since(args.since) if args.since else None
    path = args.ledger
    if path is None:
        path = Settings.from_env().ledger_path
        if path is None:
            raise UsageError("the ledger is disabled (ECOGUARD_LEDGER=off); pass --ledger PATH")
    report = build_report(path, since=since, by=args.by)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(report, width=shutil.get_terminal_size((100, 24)).columns))
    return 0
