"""Audit-only notes: what the code shows that no runtime rule covers. ``load_in_8bit=`` or
``load_in_4bit=`` passed straight to ``from_pretrained`` (transformers 5 removed them), and the
KV cache turned off (``use_cache=False``) outside a training setup."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from ecoguard.audit.index import ModuleIndex
from ecoguard.audit.site import RawNote, user_code
from ecoguard.findings import Mood

_TRAINING_MARKERS = frozenset(
    {
        "Trainer",
        "SFTTrainer",
        "Seq2SeqTrainer",
        "DPOTrainer",
        "ORPOTrainer",
        "GRPOTrainer",
        "TrainingArguments",
        "Seq2SeqTrainingArguments",
        "SFTConfig",
        "gradient_checkpointing_enable",
        "prepare_model_for_kbit_training",
        "backward",
    }
)
_TRAINING_WORDS = re.compile(r"\btrain|fine-?tun", re.IGNORECASE)


def module_trains(index: ModuleIndex) -> bool:
    """Whether the module sets up training anywhere (a Trainer, ``backward``, ...)."""
    for node in ast.walk(index.tree):
        if isinstance(node, ast.Call) and index.callee(node) in _TRAINING_MARKERS:
            return True
    return False


class NoteFinder:
    """Appends the notes of one module to ``notes``. ``lines`` are its source lines, for the
    comments the syntax tree does not keep."""

    def __init__(self, index: ModuleIndex, lines: Sequence[str], notes: list[RawNote]) -> None:
        self.index = index
        self.lines = lines
        self.notes = notes
        self.training = module_trains(index)

    def removed_kwargs(self, call: ast.Call, kwargs: dict[str, ast.expr]) -> None:
        """``load_in_8bit=``/``load_in_4bit=`` on a transformers ``from_pretrained``."""
        # load_in_8bit=False asks for nothing; only a flag that may be True is the problem.
        flags = [
            k
            for k in ("load_in_8bit", "load_in_4bit")
            if k in kwargs and self.index.constant(kwargs[k]) is not False
        ]
        if not flags:
            return
        config = (
            "BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)"
            if "load_in_8bit" in flags
            else 'BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")'
        )
        self.notes.append(
            RawNote(
                "audit/transformers5-removed-kwarg",
                Mood.YELLOW,
                f"{' and '.join(f + '=' for f in flags)} passed directly to from_pretrained: "
                "transformers 5 removed these arguments, so this load fails there.",
                f"from_pretrained(..., quantization_config={config})",
                call,
            )
        )

    def use_cache_kwarg(self, call: ast.Call, kwargs: dict[str, ast.expr]) -> None:
        """``use_cache=False`` passed to a load, a config or a generate call."""
        if "use_cache" in kwargs and self.index.constant(kwargs["use_cache"]) is False:
            # A load or config in a training setup turns the cache off on purpose; a
            # generate call with the cache off is slow whatever the script does besides.
            if self.index.callee(call) != "generate" and self._for_training(call):
                return
            self._kv_note(kwargs["use_cache"], "use_cache=True (or drop the argument)")

    def use_cache_attributes(self) -> None:
        """``<something>.use_cache = False`` anywhere in a module that does not train."""
        if self.training:
            return  # training scripts turn the cache off on purpose (gradient checkpointing)
        for node in ast.walk(self.index.tree):
            if (
                isinstance(node, ast.Assign)
                and any(
                    isinstance(t, ast.Attribute) and t.attr == "use_cache" for t in node.targets
                )
                and self.index.constant(node.value) is False
                and not self._for_training(node)
            ):
                target = next(
                    t
                    for t in node.targets
                    if isinstance(t, ast.Attribute) and t.attr == "use_cache"
                )
                # the file's own target (``llm.config.use_cache``), or a marked slot
                self._kv_note(
                    node,
                    f"{user_code(target, '<model>.config.use_cache')} = True (or drop the line)",
                )

    def _for_training(self, node: ast.AST) -> bool:
        """Whether ``node`` sits in a training setup: the module trains, or a comment on the
        statement's line or just above it says so."""
        if self.training:
            return True
        statement = node
        while not isinstance(statement, ast.stmt) and statement in self.index.parent:
            statement = self.index.parent[statement]
        first, last = getattr(statement, "lineno", 0), getattr(statement, "end_lineno", 0)
        end_column = getattr(statement, "end_col_offset", 0) or 0
        texts = []
        if 1 <= last <= len(self.lines):
            # ast counts bytes; the comment after the statement's end is what is wanted.
            tail = self.lines[last - 1].encode("utf-8")[end_column:].decode("utf-8", "replace")
            texts.append(tail.strip())
        if 2 <= first <= len(self.lines) + 1:
            texts.append(self.lines[first - 2].strip())
        return any(t.startswith("#") and _TRAINING_WORDS.search(t) for t in texts)

    def _kv_note(self, node: ast.AST, fix: str) -> None:
        self.notes.append(
            RawNote(
                "audit/kv-cache-disabled",
                Mood.ORANGE,
                "use_cache=False turns off the KV cache: each new token recomputes attention "
                "over the whole prompt and output so far, so energy grows with the square of "
                "the length.",
                fix,
                node,
            )
        )
