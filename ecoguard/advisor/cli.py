"""`ecoguard advise`, `optimize`, `compare`, `diagnose`.

Light at import (argparse only): `ecoguard --help` imports every command's cli module, so the
advisor, the knowledge tables and the rules load inside the handlers (marked ``# lazy``), and
`ecoguard advise` never imports torch.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Callable
from typing import Any

from ecoguard.config import Settings
from ecoguard.deployment import SERVING_ENGINES

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
        "--gpu-count",
        type=int,
        default=None,
        help="GPUs the model is spread over (tensor parallel): energy for all, VRAM per card "
        "(default 1)",
    )
    parser.add_argument(
        "--engine",
        choices=SERVING_ENGINES,
        default=None,
        help="serving engine: its FP8 is fused kernels and vllm/sglang/tgi/tensorrt_llm batch "
        "concurrent requests themselves (default: transformers' generate)",
    )
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
    p.set_defaults(func=_answer_for, protocol="optimize")

    p = subparsers.add_parser("compare", help="every precision for a model on a GPU, side by side")
    _deployment_flags(p, precision_help="your current precision (its traps are listed)")
    _output_flags(p)
    p.set_defaults(func=_answer_for, protocol="compare")

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
    p.set_defaults(func=_answer_for, protocol="diagnose")


def _fmt(args: argparse.Namespace) -> str:
    if args.json:
        return "json"
    return args.format or "md"


def _answered(args: argparse.Namespace, language: str, ask: Callable[[], Any]) -> int:
    """Ask, render and print one answer. A usage error (bad input, unknown names,
    contradictions) is one line in the question's language and exit 2; anything else is a bug:
    one line naming it, exit 1, never a traceback (tests call the library and see it raise)."""
    from ecoguard.advisor.rendering import render  # lazy: --help imports this module
    from ecoguard.errors import UsageError  # lazy: --help imports this module
    from ecoguard.voice import use_color  # lazy: --help imports this module

    fmt = _fmt(args)
    try:
        text = render(
            ask(), fmt=fmt, plain=args.plain, color=fmt != "json" and use_color(sys.stdout)
        )
    except UsageError as exc:
        print(usage_error_line(str(exc), language), file=sys.stderr)
        return 2
    except Exception as exc:
        print(internal_error_line(exc, language), file=sys.stderr)
        return 1
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:
        sys.stdout.buffer.write(text.encode("utf-8", errors="replace"))
    sys.stdout.flush()
    return 0


# Usage errors the parser words in English, said in Chinese for a Chinese question (by the
# English message's opening words); any other one gets the Chinese lead and its English detail.
_USAGE_ZH = {
    "I could not tell what you want to know": (
        "没看懂你想问什么。请写上模型和 GPU 再问，例如：“Qwen2.5-7B 在 A800 上最省电的配置是什么？”"
        "“比较 Qwen2.5-7B 在 5090 上的所有精度”“我想用 Yi-6B 跑 100 万字, 要花多少钱”"
    ),
}


def usage_error_line(message: str, language: str) -> str:
    """``ecoguard: error: ...`` on one line, in the question's language."""
    message = " ".join(message.split())
    if language != "zh":
        return f"ecoguard: error: {message}"
    known = next((zh for en, zh in _USAGE_ZH.items() if message.startswith(en)), None)
    if known is not None:
        return f"ecoguard: 错误：{known}"
    if sum("\u4e00" <= ch <= "\u9fff" for ch in message) * 3 >= len(message):
        return f"ecoguard: 错误：{message}"  # already worded in Chinese
    return f"ecoguard: 错误：无法回答这个问题（{message}）"


def internal_error_line(exc: BaseException, language: str) -> str:
    """A bug, named on one line: what failed and that it is ecoguard's to fix."""
    what = " ".join(f"{type(exc).__name__}: {exc}".split())
    if language == "zh":
        return f"ecoguard: 内部错误：{what}（这是 ecoguard 的缺陷，请附上你的问题报告给我们）"
    return (
        f"ecoguard: internal error: {what} (a bug in ecoguard; please report it with the question)"
    )


def _advise(args: argparse.Namespace) -> int:
    from ecoguard.advisor.answers import advise  # lazy: --help imports this module
    from ecoguard.advisor.parse import detect_language  # lazy: --help imports this module

    text = " ".join(args.text)
    return _answered(
        args, detect_language(text), lambda: advise(text, settings=Settings.from_env())
    )


# The flags that name a fact of the question under another name (diagnose's observed figures);
# every other fact's flag is named as Question.from_flags' keyword.
_RENAMED_FLAGS = {
    "throughput": "observed_throughput_tok_s",
    "power": "observed_power_w",
    "energy_per_1k": "observed_energy_j_per_1k",
}


def question_from_args(args: argparse.Namespace, protocol: str) -> Any:
    """The Question a flags command asks: the same record free text and MCP arguments make."""
    from ecoguard.advisor.question import Question  # lazy: --help imports this module

    facts = inspect.signature(Question.from_flags).parameters.keys() - {"protocol"}
    flags = {**{name: name for name in facts}, **_RENAMED_FLAGS}
    given = {fact: getattr(args, flag) for flag, fact in flags.items() if hasattr(args, flag)}
    given["region"] = given.get("region") or None  # an empty --region keeps the configured one
    return Question.from_flags(protocol, **given)


def _answer_for(args: argparse.Namespace) -> int:
    """A flags command (optimize, compare, diagnose: ``args.protocol``) answered."""
    from ecoguard.advisor.answers import answer  # lazy: --help imports this module

    def ask() -> Any:
        return answer(question_from_args(args, args.protocol), Settings.from_env())

    return _answered(args, getattr(args, "language", "en"), ask)
