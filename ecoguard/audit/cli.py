"""``ecoguard audit PATH...``: the static audit as a command, for editors, pre-commit and CI.

Exit codes: 0 nothing at or above ``--severity``; 1 findings (or audit notes) at or above it;
2 a usage error or a file that could not be audited (the others are still reported).
The audit is pure Python (no torch, transformers or prometheus_client), and importing this
module imports the ``ecoguard.audit`` package anyway, so its modules are imported at the top.
"""

from __future__ import annotations

import argparse
import sys

from ecoguard.audit import audit_paths
from ecoguard.audit.render import render_json, render_sarif, render_text, shown
from ecoguard.errors import UsageError
from ecoguard.findings import Mood

FORMATS = ("text", "json", "sarif")
SEVERITIES = ("yellow", "orange", "red")
# The whole run's limit by default, in seconds: every reader is linear in its input (about
# 1 s per 150 KB of Python; see RELIABILITY.md), so only a very large tree or a defect gets
# near it; a hang can no longer hold a CI job or a pre-commit hook for good.
DEFAULT_TIME_LIMIT_S = 300.0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit",
        help=(
            "find energy traps in Python files, notebooks and engine launch files (shell, "
            "Dockerfile, compose, Kubernetes YAML), with file and line"
        ),
        description=(
            "Read Python files, Jupyter notebooks and serving-engine launch files (shell "
            "scripts, Dockerfiles, docker-compose and Kubernetes YAML), never importing or "
            "running them, and report every energy trap the runtime guard would catch, with "
            "file, line, fix and estimated impact. Exit 0 clean, 1 findings at or above "
            "--severity, 2 usage error, a file that could not be audited, or the time limit "
            "reached (the findings made before it are still reported)."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text (default), json, or sarif (SARIF 2.1.0 for GitHub code scanning)",
    )
    parser.add_argument("--json", action="store_true", help="same as --format json")
    parser.add_argument(
        "--severity",
        choices=SEVERITIES,
        default="yellow",
        help="lowest mood that makes the exit code 1 (default yellow)",
    )
    parser.add_argument(
        "--gpu",
        default=None,
        metavar="G",
        help="the GPU the code will run on (T4, A100, rtx4090...): enables GPU-dependent rules",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="skip paths matching this glob (repeatable), e.g. 'tests/*' or '*_test.py'",
    )
    parser.add_argument(
        "--output", "-o", default=None, metavar="FILE", help="write the report to FILE"
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT_S,
        metavar="SECONDS",
        help=(
            f"stop the whole audit after SECONDS (default {DEFAULT_TIME_LIMIT_S:g}; 0: no "
            "limit); what was found before is reported, and the exit code is 2"
        ),
    )
    parser.set_defaults(func=run_audit)


def run_audit(args: argparse.Namespace) -> int:
    if args.time_limit < 0:
        raise UsageError(
            f"--time-limit must be 0 (no limit) or a number of seconds, got {args.time_limit:g}"
        )
    result = audit_paths(
        args.paths,
        gpu=args.gpu,
        exclude=args.exclude,
        time_limit_s=args.time_limit or None,
    )
    fmt = "json" if args.json else args.format
    if fmt == "json":
        report = render_json(result)
    elif fmt == "sarif":
        report = render_sarif(result)
    else:
        to_terminal = args.output is None and sys.stdout.isatty()
        report = render_text(result, color=to_terminal)
    if args.output:
        try:
            # backslashreplace: a stray undecodable file name never loses the whole report
            with open(args.output, "w", encoding="utf-8", errors="backslashreplace") as handle:
                handle.write(report)
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    else:
        sys.stdout.write(report)
    for problem in result.errors:
        print(
            f"ecoguard audit: {shown(problem.path)}: {problem.kind}: {shown(problem.message)}",
            file=sys.stderr,
        )
    return result.exit_code(Mood(args.severity))
