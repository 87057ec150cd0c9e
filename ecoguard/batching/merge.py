"""Building one left-padded batch from several calls, and cutting each caller's result back out.

Layout of a batch of prompts ``P_i`` wide (each caller's own left padding kept), padded to
``P = max(P_i)``: row ``r`` of caller ``i`` is ``[P - P_i extra pads][caller's prompt][new]``.
The batch runs for ``G`` new tokens; a caller alone would have stopped after ``G_i <= G`` new
tokens (when all of *its* rows had produced EOS, or at ``max_new_tokens``), and transformers fills
a finished row with the pad token in both cases. So the caller's exact lone result is the slice
``[P - P_i : P + G_i]`` of its rows, and the same step range of any per-step scores or logits.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from ecoguard.batching.keys import Prepared


def pad_left(requests: Sequence[Prepared]) -> tuple[Any, Any]:
    """Concatenate the callers' prompts into one left-padded ``(input_ids, attention_mask)``."""
    import torch

    width = max(r.prompt_len for r in requests)
    ids_parts, mask_parts = [], []
    for r in requests:
        extra = width - r.prompt_len
        ids, mask = r.input_ids, r.attention_mask
        if extra:
            ids = torch.cat([ids.new_full((ids.shape[0], extra), r.pad_token_id), ids], dim=1)
            mask = torch.cat([mask.new_zeros((mask.shape[0], extra)), mask], dim=1)
        ids_parts.append(ids)
        mask_parts.append(mask)
    return torch.cat(ids_parts, dim=0), torch.cat(mask_parts, dim=0)


def split(output: Any, requests: Sequence[Prepared]) -> list[Any]:
    """Each caller's part of a batched ``generate`` result, shaped as if it had run alone."""
    sequences = output if not hasattr(output, "sequences") else output.sequences
    width = max(r.prompt_len for r in requests)
    results = []
    row = 0
    for r in requests:
        rows = slice(row, row + r.rows)
        row += r.rows
        new_tokens = _lone_new_tokens(sequences[rows, width:], r.eos_token_ids)
        start = width - r.prompt_len
        own = sequences[rows, start : width + new_tokens]
        if r.return_dict and hasattr(output, "sequences"):
            results.append(_split_dict(output, own, rows, new_tokens, start, width))
        else:
            results.append(own)
    return results


def _lone_new_tokens(generated: Any, eos_token_ids: tuple[int, ...]) -> int:
    """How many new tokens the caller's rows would have produced alone: the longest row up to and
    including its first EOS (a row without EOS ran to the batch's end)."""
    import torch

    total = int(generated.shape[1])
    if not eos_token_ids or total == 0:
        return total
    eos = torch.tensor(eos_token_ids, device=generated.device, dtype=generated.dtype)
    is_eos = torch.isin(generated, eos)
    has_eos = is_eos.any(dim=1)
    first = is_eos.int().argmax(dim=1) + 1
    lengths = torch.where(has_eos, first, torch.full_like(first, total))
    return int(lengths.max())


def _split_dict(output: Any, sequences: Any, rows: slice, steps: int, start: int, width: int):
    """A GenerateDecoderOnlyOutput for one caller: its rows and its first ``steps`` steps.

    The key/value cache (when returned) is cut to the positions the caller's own run would hold:
    its prompt and all but the last generated token.
    """
    fields: dict[str, Any] = {}
    for name, value in output.items():
        if name == "sequences":
            fields[name] = sequences
        elif name in ("scores", "logits") and value is not None:
            fields[name] = tuple(step[rows] for step in value[:steps])
        elif name in ("cache", "past_key_values") and value is not None:
            fields[name] = _slice_cache(value, rows, start, width + steps - 1)
        else:
            fields[name] = value
    return type(output)(**fields)


def _slice_cache(cache: Any, rows: slice, start: int, end: int) -> Any:
    """A copy of a dynamic cache holding only ``rows`` and positions ``start:end``; None for a
    cache layout this does not know (documented in docs/batching.md)."""
    layers = getattr(cache, "layers", None)
    if not layers:
        return None
    new_layers = []
    for layer in layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if type(layer).__name__ != "DynamicLayer" or getattr(keys, "dim", lambda: 0)() != 4:
            return None
        clone = copy.copy(layer)
        clone.keys = keys[rows, :, start:end].clone()
        clone.values = values[rows, :, start:end].clone()
        new_layers.append(clone)
    sliced = copy.copy(cache)
    sliced.layers = new_layers
    return sliced
