"""`ecoguard advise`, `optimize`, `compare`, `diagnose`.

Light at import (argparse only): `ecoguard --help` imports every command's cli module, so the
advisor, the knowledge tables and the rules load inside the handlers (marked ``# lazy``), and
`ecoguard advise` never imports torch.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ecoguard.config import Settings

FORMATS = ("md", "text", "json")


def _output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="JSON output (same as --format json)")
    parser.add_argument("--plain", action="store_true", help="no persona line (mood tag only)")
    parser.add_argument(
        "--format", choices=FORMATS, default=None, help="md (default), text or json"
    )


def _deployment_flags(parser: argparse.ArgumentParser, *, precision_help: str) -> None:
    parser.add_argument(
        "--model", required=True, help="model id or size: Qwen2.5-7B, mistral-7b, 7B"
    )
    parser.add_argument(
        "--gpu",
        default=None,
        help="GPU profile or nickname: 5090, 4090D, a800, h100, t4 (default rtx4090d)",
    )
    parser.add_argument("--precision", default=None, help=precision_help)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--prompt-tokens", type=int, default=None)
    parser.add_argument("--generation-tokens", type=int, default=None)
    parser.add_argument("--requests-per-month", type=int, default=None)
    parser.add_argument("--region", default=None, help="us, china, eu, uk, fr, de, in, jp, ca")
    parser.add_argument(
        "--language",
        choices=("en", "zh"),
        default="en",
        help="language of the answer: en (default) or zh",
    )


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "advise",
        help="answer an energy question in English or Chinese",
        description='Answer a question such as "greenest config for Qwen2.5-3B on RTX 5090" or '
        '"我想用 Yi-6B 跑 100 万字, 要花多少钱" from the reference data.',
    )
    p.add_argument("text", nargs="+", help="the question (quote it)")
    _output_flags(p)
    p.set_defaults(func=_advise)

    p = subparsers.add_parser(
        "optimize", help="recommended precision and batch size for a model on a GPU"
    )
    _deployment_flags(p, precision_help="current precision (default fp16)")
    p.add_argument(
        "--use",
        choices=("chat", "api", "batch"),
        default=None,
        help="chat (one interactive user), api (served requests, batched), batch (offline "
        "job); default: api, or batch past batch size 16",
    )
    _output_flags(p)
    p.set_defaults(func=_optimize)

    p = subparsers.add_parser("compare", help="every precision for a model on a GPU, side by side")
    _deployment_flags(p, precision_help="your current precision (its traps are listed)")
    _output_flags(p)
    p.set_defaults(func=_compare)

    p = subparsers.add_parser(
        "diagnose", help="your measured figures against the reference: which trap matches"
    )
    _deployment_flags(p, precision_help="precision in use (inferred from the figures when omitted)")
    p.add_argument("--throughput", type=float, default=None, help="observed tokens per second")
    p.add_argument("--power", type=float, default=None, help="observed average power, W")
    p.add_argument(
        "--energy-per-1k", type=float, default=None, help="observed J per 1k generated tokens"
    )
    _output_flags(p)
    p.set_defaults(func=_diagnose)


def _fmt(args: argparse.Namespace) -> str:
    if args.json:
        return "json"
    return args.format or "md"


def _emit(answer: Any, args: argparse.Namespace) -> int:
    from ecoguard.advisor.rendering import render  # lazy: --help imports this module
    from ecoguard.voice import use_color  # lazy: --help imports this module

    fmt = _fmt(args)
    text = render(answer, fmt=fmt, plain=args.plain, color=fmt != "json" and use_color(sys.stdout))
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:
        sys.stdout.buffer.write(text.encode("utf-8", errors="replace"))
    sys.stdout.flush()
    return 0


def _advise(args: argparse.Namespace) -> int:
    from ecoguard.advisor.answers import advise  # lazy: --help imports this module

    return _emit(advise(" ".join(args.text), settings=Settings.from_env()), args)


# The flags that name a fact of the question under another name (diagnose's observed figures).
_RENAMED_FLAGS = {
    "throughput": "observed_throughput_tok_s",
    "power": "observed_power_w",
    "energy_per_1k": "observed_energy_j_per_1k",
}
# The facts a flags command may give (each a keyword of Question.from_flags).
_FACT_FLAGS = (
    "model",
    "gpu",
    "precision",
    "batch_size",
    "prompt_tokens",
    "generation_tokens",
    "requests_per_month",
    "region",
    "use",
    "language",
)


def question_from_args(args: argparse.Namespace, protocol: str) -> Any:
    """The Question a flags command asks: the same record free text and MCP arguments make."""
    from ecoguard.advisor.question import Question  # lazy: --help imports this module

    facts = {name: getattr(args, name) for name in _FACT_FLAGS if hasattr(args, name)}
    facts.update(
        {
            field: getattr(args, flag)
            for flag, field in _RENAMED_FLAGS.items()
            if hasattr(args, flag)
        }
    )
    facts["region"] = facts.get("region") or None  # an empty --region keeps the configured one
    return Question.from_flags(protocol, **facts)


def _answer_for(args: argparse.Namespace, protocol: str) -> Any:
    from ecoguard.advisor.answers import answer  # lazy: --help imports this module

    return answer(question_from_args(args, protocol), Settings.from_env())


def _optimize(args: argparse.Namespace) -> int:
    return _emit(_answer_for(args, "optimize"), args)


def _compare(args: argparse.Namespace) -> int:
    return _emit(_answer_for(args, "compare"), args)


def _diagnose(args: argparse.Namespace) -> int:
    return _emit(_answer_for(args, "diagnose"), args)
