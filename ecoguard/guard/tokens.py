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


def _eos_list(eos_token_id: int | Iterable[int] | Any | None) -> list[int]:
    if eos_token_id is None:
        return []
    if isinstance(eos_token_id, int):
        return [eos_token_id]
    tolist = getattr(eos_token_id, "tolist", None)
    values = tolist() if tolist is not None else list(eos_token_id)
    if isinstance(values, int):
        return [values]
    return [int(value) for value in values]


def generated_lengths(
    output: Any,
    *,
    prompt_length: int,
    eos_token_id: int | Iterable[int] | None = None,
    pad_token_id: int | None = None,
) -> list[int]:
    """Generated tokens per output row (see the module docstring for the counting rule).

    ``prompt_length`` is the width of the prompt part of each output row (the padded input
    width for decoder-only models; 0 when the output holds only new tokens)."""
    import torch

    sequences = output_sequences(output)
    if not isinstance(sequences, torch.Tensor) or sequences.dim() != 2:
        raise TypeError(f"expected a 2-D token tensor, got {type(sequences).__name__}")
    generated = sequences[:, prompt_length:]
    rows, width = generated.shape
    if rows == 0:
        return []
    if width == 0:
        return [0] * rows
    lengths = torch.full((rows,), width, dtype=torch.long, device=generated.device)
    has_eos = torch.zeros(rows, dtype=torch.bool, device=generated.device)
    eos = _eos_list(eos_token_id)
    if eos:
        eos_tensor = torch.tensor(eos, dtype=generated.dtype, device=generated.device)
        is_eos = torch.isin(generated, eos_tensor)
        has_eos = is_eos.any(dim=1)
        first_eos = is_eos.to(torch.int8).argmax(dim=1)
        lengths = torch.where(has_eos, first_eos + 1, lengths)
    if pad_token_id is not None:
        # Rows without EOS: drop trailing padding (rows stopped by other criteria get padded).
        not_pad = generated != pad_token_id
        any_real = not_pad.any(dim=1)
        last_real = width - not_pad.flip(dims=(1,)).to(torch.int8).argmax(dim=1)
        trimmed = torch.where(any_real, last_real, torch.zeros_like(last_real))
        lengths = torch.where(has_eos, lengths, trimmed)
    return [int(value) for value in lengths.tolist()]


def count_generated(
    output: Any,
    *,
    prompt_length: int,
    eos_token_id: int | Iterable[int] | None = None,
    pad_token_id: int | None = None,
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
