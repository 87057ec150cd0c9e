"""Counting generated tokens the way energy per token must be counted.

Per sequence: the tokens after the prompt, up to and including the first EOS. Tokens after it
are padding that ``generate`` appends once a row has finished while others continue; they cost
(almost) nothing per row and must not dilute joules per token. A row that never emits EOS (it
hit ``max_new_tokens``, or a stop string) counts up to its last non-pad token.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def output_sequences(output: Any) -> Any:
    """The token tensor of a ``generate`` result: the tensor itself or ``GenerateOutput.sequences``."""
    sequences = getattr(output, "sequences", None)
    return output if sequences is None else sequences


def _token_ids(value: int | Iterable[int] | Any | None) -> list[int]:
    """An EOS or pad id setting (an int, a list of them, or a tensor) as a list of ints."""
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    tolist = getattr(value, "tolist", None)
    values = tolist() if tolist is not None else list(value)
    if isinstance(values, int):
        return [values]
    return [int(item) for item in values]


def generated_lengths(
    output: Any,
    *,
    prompt_length: int,
    eos_token_id: int | Iterable[int] | None = None,
    pad_token_id: int | Iterable[int] | None = None,
) -> list[int]:
    """Generated tokens per output row (see the module docstring for the counting rule).

    ``prompt_length`` is the width of the prompt part of each output row (the padded input
    width for decoder-only models; 0 when the output holds only new tokens).

    The new-token part is moved to the host once (``tolist``: on a GPU one copy, and the one
    sync the result needs) and scanned there: ``list.index`` finds a row's first EOS at C speed.
    Done on the tensor instead, the same rule took a dozen small torch operations, each paying
    the dispatcher's fixed cost (and on a GPU a kernel launch), about ten times the CPU for the
    batches generate returns (benchmarks/measured_call_overhead.py)."""
    import torch

    sequences = output_sequences(output)
    if not isinstance(sequences, torch.Tensor) or sequences.dim() != 2:
        raise TypeError(f"expected a 2-D token tensor, got {type(sequences).__name__}")
    rows: list[list[Any]] = sequences[:, prompt_length:].tolist()
    eos = _token_ids(eos_token_id)
    pads = frozenset(_token_ids(pad_token_id))
    return [_row_length(row, eos, pads) for row in rows]


def _row_length(row: list[Any], eos: list[int], pads: frozenset[int]) -> int:
    """Tokens up to and including the first EOS; without one, up to the last non-pad token."""
    first = len(row)
    for token in eos:
        try:
            first = row.index(token, 0, first)
        except ValueError:
            continue
    if first < len(row):
        return first + 1
    end = len(row)
    if pads:
        while end and row[end - 1] in pads:
            end -= 1
    return end


def count_generated(
    output: Any,
    *,
    prompt_length: int,
    eos_token_id: int | Iterable[int] | None = None,
    pad_token_id: int | Iterable[int] | None = None,
) -> int:
    """Total generated tokens over all rows of ``output`` (a tensor or a ``GenerateOutput``)."""
    return sum(
        generated_lengths(
            output,
            prompt_length=prompt_length,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
        )
    )
