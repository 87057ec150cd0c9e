"""Which generate calls may share a batch, and the normalised form a batch is built from.

Coalescing is only worth doing if nobody can tell: each caller must get back exactly what its own
``model.generate`` would have returned. That holds for a decoder-only model whose positions come
from the attention mask (so extra left padding shifts nothing) and for generation settings that
look only at the new tokens or at each row on its own. Anything outside that set (beam search,
repetition penalties that read the padded prompt, per-call logits processors, streamers, caches
passed in, ``max_length`` that counts the padded prompt...) runs alone, untouched.

``prepare(model, args, kwargs)`` returns a :class:`Prepared` request or a short reason string
saying why the call must run alone; the reason feeds ``batching_stats()``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# generate() keyword arguments a batch can honour, all of which go into the compatibility key
# (every caller in a batch has equal values). Each acts per row or counts only new tokens.
KEYED_KWARGS: frozenset[str] = frozenset(
    {
        "max_new_tokens",
        "min_new_tokens",
        "do_sample",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "typical_p",
        "epsilon_cutoff",
        "eta_cutoff",
        "num_beams",
        "num_return_sequences",
        "eos_token_id",
        "pad_token_id",
        "bos_token_id",
        "use_cache",
        "return_dict_in_generate",
        "output_scores",
        "output_logits",
        "renormalize_logits",
        "remove_invalid_values",
        "suppress_tokens",
    }
)
INPUT_KWARGS: frozenset[str] = frozenset({"input_ids", "inputs", "attention_mask"})

# Generation-config attributes that would make a batched result differ from a lone one (they read
# the padded prompt, count the prompt in a length, search across rows, or stop on wall time).
# The model's generation_config must hold one of the neutral values for each.
NEUTRAL_CONFIG: dict[str, tuple[Any, ...]] = {
    "num_beams": (None, 1),
    "num_beam_groups": (None, 1),
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "min_length": (None, 0),
    "max_time": (None,),
    "stop_strings": (None,),
    "penalty_alpha": (None,),
    "dola_layers": (None,),
    "prompt_lookup_num_tokens": (None,),
    "bad_words_ids": (None,),
    "force_words_ids": (None,),
    "constraints": (None,),
    "sequence_bias": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "begin_suppress_tokens": (None,),
    "exponential_decay_length_penalty": (None,),
    "watermarking_config": (None,),
    "guidance_scale": (None, 1.0),
    "cache_implementation": (None, "dynamic"),
    "output_attentions": (None, False),
    "output_hidden_states": (None, False),
    "token_healing": (None, False),
    "low_memory": (None, False),
    "use_mtp": (None, False),
    "prefill_chunk_size": (None,),
}


@dataclass(frozen=True, slots=True)
class Prepared:
    """One generate call in the normalised form a batch is assembled from.

    ``input_ids`` and ``attention_mask`` are the caller's own tensors (its own left padding kept);
    ``key`` is equal for calls that may share a batch; ``rows`` is the number of output sequences
    the call yields (prompt rows x ``num_return_sequences``), which is what ``max_batch_size``
    counts; ``prompt_len`` is the caller's padded prompt width.
    """

    input_ids: Any
    attention_mask: Any
    kwargs: dict[str, Any]
    key: tuple
    rows: int
    prompt_len: int
    pad_token_id: int
    eos_token_ids: tuple[int, ...]
    num_return_sequences: int
    return_dict: bool


def prepare(model: Any, args: tuple, kwargs: dict[str, Any]) -> Prepared | str:
    """Normalise one ``generate(*args, **kwargs)`` call, or say why it must run alone.

    The checks run in a fixed order (the model, the arguments, the inputs, the generation
    config, the tokens, the mask, the key) and the first that fails names the reason."""
    refusal = _call_refusal(model, args, kwargs)
    if refusal is not None:
        return refusal
    input_ids = _input_ids(args, kwargs)
    if input_ids is None:
        return "inputs"
    gen_config = getattr(model, "generation_config", None)
    refusal = _config_refusal(gen_config)
    if refusal is not None:
        return refusal
    tokens = _special_tokens(kwargs, gen_config)
    if isinstance(tokens, str):
        return tokens
    pad_token_id, eos_token_ids = tokens
    mask = _left_padded_mask(kwargs.get("attention_mask"), input_ids, pad_token_id, eos_token_ids)
    if mask is None:
        return "attention-mask"
    num_return_sequences = _effective(kwargs, gen_config, "num_return_sequences") or 1
    if not isinstance(num_return_sequences, int) or num_return_sequences < 1:
        return "num-return-sequences"
    keyed = {k: v for k, v in kwargs.items() if k in KEYED_KWARGS}
    try:
        key_items = tuple(sorted((k, _hashable(v)) for k, v in keyed.items()))
        hash(key_items)
    except TypeError:
        return "unhashable-kwarg"
    return Prepared(
        input_ids=input_ids,
        attention_mask=mask,
        kwargs=keyed,
        key=(str(input_ids.device), input_ids.dtype, str(mask.dtype), key_items),
        rows=int(input_ids.shape[0]) * num_return_sequences,
        prompt_len=int(input_ids.shape[1]),
        pad_token_id=pad_token_id,
        eos_token_ids=eos_token_ids,
        num_return_sequences=num_return_sequences,
        return_dict=bool(_effective(kwargs, gen_config, "return_dict_in_generate")),
    )


def _call_refusal(model: Any, args: tuple, kwargs: dict[str, Any]) -> str | None:
    """Why the model or the shape of the call rules batching out; None when neither does."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    if not _positions_from_mask(type(model)):
        return "model-positions"
    if len(args) > 1:
        return "positional-args"
    unknown = set(kwargs) - KEYED_KWARGS - INPUT_KWARGS
    if unknown:
        return "kwarg:" + sorted(unknown)[0]
    return None


def _input_ids(args: tuple, kwargs: dict[str, Any]) -> Any:
    """The call's one prompt tensor (2-D, integer, not empty), or None."""
    import torch

    inputs = [x for x in (*args, kwargs.get("inputs"), kwargs.get("input_ids")) if x is not None]
    if len(inputs) != 1:
        return None
    input_ids = inputs[0]
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        return None
    if input_ids.dtype not in (torch.long, torch.int) or input_ids.numel() == 0:
        return None
    return input_ids


def _config_refusal(gen_config: Any) -> str | None:
    """The first generation-config attribute that is not at a neutral value, as a reason."""
    for attr, neutral in NEUTRAL_CONFIG.items():
        if getattr(gen_config, attr, None) not in neutral:
            return "config:" + attr
    return None


def _effective(kwargs: dict[str, Any], gen_config: Any, name: str) -> Any:
    """The call's value for ``name``, else the model's generation config's."""
    value = kwargs.get(name)
    return getattr(gen_config, name, None) if value is None else value


def _special_tokens(kwargs: dict[str, Any], gen_config: Any) -> tuple[int, tuple[int, ...]] | str:
    """(pad token id, EOS token ids) for a call that may batch, or the reason it may not."""
    # Without max_new_tokens, generate stops at max_length, which counts the prompt: a wider,
    # padded batch would stop earlier than the caller alone. Only a max_new_tokens is safe.
    max_new_tokens = _effective(kwargs, gen_config, "max_new_tokens")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool):
        return "max-new-tokens"
    if _effective(kwargs, gen_config, "num_beams") not in (None, 1):
        return "beam-search"
    pad_token_id = _single_int(_effective(kwargs, gen_config, "pad_token_id"))
    if pad_token_id is None:
        return "no-pad-token"
    eos_token_ids = _int_tuple(_effective(kwargs, gen_config, "eos_token_id"))
    if eos_token_ids is None:
        return "eos-token"
    return pad_token_id, eos_token_ids


def _left_padded_mask(
    mask: Any, input_ids: Any, pad_token_id: int, eos_token_ids: tuple[int, ...]
) -> Any:
    """The call's attention mask on the inputs' device (inferred as transformers would when
    absent), or None when it is not a left-padding mask of the inputs' shape."""
    import torch

    if mask is None:
        return _default_mask(input_ids, pad_token_id, eos_token_ids)
    if not isinstance(mask, torch.Tensor) or mask.shape != input_ids.shape:
        return None
    mask = mask.to(input_ids.device)
    # Only left padding (zeros, then ones) is known to give the same positions in a batch.
    if bool(((mask != 0) & (mask != 1)).any()) or not bool(
        torch.equal(mask.long(), mask.long().cummax(dim=1).values)
    ):
        return None
    return mask


@lru_cache(maxsize=64)
def _positions_from_mask(model_cls: type) -> bool:
    """True when generate derives position ids from the attention mask (forward takes
    ``position_ids``), so a row's extra left padding leaves its positions unchanged."""
    try:
        return "position_ids" in inspect.signature(model_cls.forward).parameters
    except (TypeError, ValueError):
        return False


def _default_mask(input_ids: Any, pad_token_id: int, eos_token_ids: tuple[int, ...]) -> Any:
    """The mask transformers infers for a call without one: pad positions are masked when the
    pad token occurs in the input and differs from every EOS token, else everything attends."""
    if pad_token_id not in eos_token_ids and bool((input_ids == pad_token_id).any()):
        return input_ids.ne(pad_token_id).long()
    return input_ids.new_ones(input_ids.shape, dtype=input_ids.dtype).long()


def _single_int(value: Any) -> int | None:
    if value is None:
        return None
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            return None
        value = value[0]
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _int_tuple(value: Any) -> tuple[int, ...] | None:
    """EOS ids as a tuple (empty: no EOS); None when the value is not understood."""
    if value is None:
        return ()
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return tuple(value)
    return None


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if hasattr(value, "tolist") and not isinstance(value, (int, float, str)):
        raise TypeError("tensor-valued generate argument")
    return value
