"""The ``ecoguard`` command.

Each part of the package contributes its subcommands through a ``register(subparsers)`` function
in its own ``cli`` module; this file only assembles them. Those modules must stay light at import
(argument definitions only) so that ``ecoguard advise`` starts fast: heavy imports go inside the
command functions.

Exit codes: 0 fine, 1 findings (audit) or a failed check, 2 usage error.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from collections.abc import Sequence

from ecoguard import __version__
from ecoguard.errors import UsageError

# Which module registers each command. Only the module of the command being run is imported,
# so `ecoguard advise` never pays for the audit's or the exporter's imports; `--help` imports all.
# Each module defines register(subparsers); a command's parser calls set_defaults(func=handler)
# with handler(args) -> int.
COMMANDS: dict[str, str] = {
    "advise": "ecoguard.advisor.cli",
    "optimize": "ecoguard.advisor.cli",
    "compare": "ecoguard.advisor.cli",
    "diagnose": "ecoguard.advisor.cli",
    "estimate": "ecoguard.knowledge.cli",
    "data": "ecoguard.knowledge.cli",
    "audit": "ecoguard.audit.cli",
    "report": "ecoguard.export.cli",
    "exporter": "ecoguard.export.exporter_cli",
    "doctor": "ecoguard.guard.cli",
    "demo": "ecoguard.demo.cli",
    "bench": "ecoguard.bench.cli",
    "mcp": "ecoguard.mcp.cli",
}
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so main() owns the exit code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with only ``command``'s module when one is named."""
    parser = _Parser(
        prog="ecoguard",
        description="Catch GPU energy traps in LLM serving and measure joules per token.",
    )
    parser.add_argument("--version", action="version", version=f"ecoguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    modules = (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # An optional part whose extra is missing removes only its own commands.
            if exc.name is not None and module_name.startswith(exc.name):
                continue
            raise
        module.register(sub)
    return parser


# -- argument checks shared by every command ----------------------------------------------------
#
# argparse's float accepts "nan" and "inf", and any option accepts "" or text with terminal
# escapes; each command would otherwise have to refuse them itself (most did not: NaN reached
# --json output, an empty --model a TypeError, an ESC in --model the terminal). These checks run
# on the parsed arguments of every command, before its handler.

# Options naming a thing (a model, a GPU, a region, a time): never empty, never a control,
# bidi or format character (echoed into answers and terminals), never undecodable bytes.
NAME_OPTIONS: frozenset[str] = frozenset(
    {"model", "gpu", "precision", "region", "since", "addr", "tier", "use", "holdout"}
)
# Options naming files or directories: never empty (an empty audit path meant ".").
PATH_OPTIONS: frozenset[str] = frozenset(
    {"paths", "ledger", "out", "output", "multiproc_dir", "exclude"}
)
# Numeric options that measure something: above zero.
POSITIVE_OPTIONS: frozenset[str] = frozenset(
    {"power", "throughput", "energy_per_1k", "params_b", "sample_hz"}
)


def check_arguments(args: argparse.Namespace) -> None:
    """UsageError (exit 2) for a non-finite number, an empty value, or a name holding control
    or bidi characters, in any command's parsed arguments."""
    for name, value in vars(args).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise UsageError(f"{flag} must be a finite number, got {value}")
            if name in POSITIVE_OPTIONS and value <= 0:
                raise UsageError(f"{flag} must be above 0, got {value:g}")
        elif name in NAME_OPTIONS and isinstance(value, str):
            _check_name(flag, value)
        elif name in PATH_OPTIONS:
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, str) and not item.strip():
                    what = "PATH" if name == "paths" else flag
                    raise UsageError(f"empty {what}; give a file or directory name")


def _check_name(flag: str, value: str) -> None:
    if not value.strip():
        raise UsageError(f"empty {flag}; give a value (see `ecoguard COMMAND --help`)")
    bad = next((ch for ch in value if not ch.isprintable()), None)
    if bad is not None:
        kind = (
            "an undecodable byte" if 0xDC80 <= ord(bad) <= 0xDCFF else "a control or bidi character"
        )
        raise UsageError(f"{flag} holds {kind} (U+{ord(bad):04X}); give plain printable text")


def _os_error_text(exc: OSError) -> str:
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is None:
        return reason
    name = repr(exc.filename) if not isinstance(exc.filename, int) else str(exc.filename)
    if len(name) > 120:
        name = name[:100] + "..." + name[-12:]
    return f"{name}: {reason}"


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        command = next((a for a in args_list if not a.startswith("-")), None)
        parser = build_parser(command)
        args = parser.parse_args(args_list)
        func = getattr(args, "func", None)
        if func is None:
            parser.print_help()
            return 2
        check_arguments(args)
        code = int(func(args) or 0)
        sys.stdout.flush()  # inside the try: a reader that closed the pipe is seen here
        return code
    except BrokenPipeError:
        # The reader closed the pipe (`ecoguard data --rows | head -1`): it has what it wanted,
        # which is not an error. Point stdout at devnull so the interpreter's own flush at exit
        # does not raise again (the recipe in Python's signal module documentation).
        _detach_stdout()
        return 0
    except UsageError as exc:
        print(f"ecoguard: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        # A file named on the command line that cannot be used (too long a name, a directory
        # where a file is wanted, no permission): the user's to fix, said in one line.
        print(f"ecoguard: error: {_os_error_text(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ecoguard: interrupted", file=sys.stderr)
        return 130


def _detach_stdout() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO): nothing to do
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
