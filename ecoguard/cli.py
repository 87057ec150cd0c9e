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
import sys
from collections.abc import Sequence

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
    "demo": "ecoguard.demo",
    "bench": "ecoguard.bench.cli",
    "mcp": "ecoguard.mcp_server",
}
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so main() owns the exit code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with only ``command``'s module when one is named."""
    from ecoguard import __version__

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
        return int(func(args) or 0)
    except UsageError as exc:
        print(f"ecoguard: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ecoguard: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
