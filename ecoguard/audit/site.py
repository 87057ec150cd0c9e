"""What the extraction of one module yields: call sites (one Deployment each) and the
audit-only notes no runtime rule covers.

A site carries the node a finding should point at, and the rules whose facts could not be
worked out (``unknown``): their findings are dropped rather than guessed.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field

from ecoguard.deployment import Deployment
from ecoguard.findings import Mood


@dataclass(slots=True)
class Site:
    """One place in the module where a deployment happens."""

    kind: str  # load, pipeline, vllm, torchao-quantize, config, generate, pipeline-call
    node: ast.AST
    deployment: Deployment
    config_node: ast.AST | None = None
    unknown: frozenset[str] = frozenset()
    only: tuple[str, ...] | None = None  # restrict evaluate() to these rules
    details: tuple[tuple[str, object], ...] = ()
    # rule -> ((field, text), ...): the audit's own wording for a finding of that rule, where
    # the runtime wording would claim what only a live process sees ("8 calls ran").
    wording: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    # (old, new) text replacements in the fixes of the quantization rules, so a fix names the
    # call the code used (pipeline(...), LLM(...)) rather than from_pretrained.
    fix_replace: tuple[tuple[str, str], ...] = ()
    # (precision, label): vram-overflow prices the weights as this precision (torchao int4
    # has no precision of its own in the record) and calls them by the label.
    vram_precision: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class RawNote:
    """An audit-only observation at ``node``; ``kind`` is a key of ``NOTE_KINDS``."""

    kind: str
    mood: Mood
    message: str
    fix: str
    node: ast.AST


@dataclass(slots=True)
class Extraction:
    sites: list[Site] = field(default_factory=list)
    notes: list[RawNote] = field(default_factory=list)


# Longest code of the user's shown in a fix (a longer expression becomes a marked slot).
_CODE_LIMIT = 60


def user_code(expr: ast.expr | None, placeholder: str) -> str:
    """The code of ``expr`` as the file writes it, for a fix in the user's own names; the
    marked ``placeholder`` when there is none or it is too long for one line of a fix."""
    if expr is None:
        return placeholder
    line, end = getattr(expr, "lineno", None), getattr(expr, "end_lineno", None)
    if line is not None and (
        end != line or (expr.end_col_offset or 0) - expr.col_offset > 4 * _CODE_LIMIT
    ):
        return placeholder  # too long, known before paying for unparse (a 100 KB literal)
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        text = json.dumps(expr.value, ensure_ascii=False)  # "..." as code is usually written
        return text if len(text) <= _CODE_LIMIT and text.isprintable() else placeholder
    try:
        text = ast.unparse(expr)
    except (ValueError, RecursionError):  # pragma: no cover - unparse of a parsed tree
        return placeholder
    return text if len(text) <= _CODE_LIMIT and "\n" not in text else placeholder
