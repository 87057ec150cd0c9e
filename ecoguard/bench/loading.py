"""Loading one model configuration per precision, and building the fixed prompts.

torch and transformers are imported inside the functions: this module is imported only when a
bench runs. A configuration the platform cannot run raises :class:`CellSkipped` with the reason,
so the runner can report that cell as skipped and go on with the others.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from typing import Any

_log = logging.getLogger("ecoguard.bench")

BNB_PRECISIONS = frozenset({"nf4", "nf4_dq", "int8_mixed", "int8_pure"})
TORCHAO_PRECISIONS = frozenset({"fp8_weight_only", "fp8_dynamic"})

# A fixed, neutral passage: prompts built from it with the model's tokenizer are the same in
# every session, so runs on different days and machines compare.
PROMPT_TEXT = (
    "Energy use of language model inference depends on the precision of the weights, the batch "
    "size, the length of the prompt and the number of generated tokens. Measure each "
    "configuration several times after a warm-up, keep the prompt and generation lengths fixed, "
    "and compare against a half-precision baseline taken in the same session. "
)


class CellSkipped(Exception):
    """This cell (or every cell of a precision) cannot run here; ``str(exc)`` says why."""


class ModelUnavailable(CellSkipped):
    """The model itself cannot be read (missing folder, hub unreachable): no precision will load,
    so the runner skips the remaining ones with the same reason instead of retrying each."""


def quantization_backend(precision: str) -> str:
    """The community-format name of the library doing the quantization."""
    if precision in BNB_PRECISIONS:
        return "bitsandbytes"
    if precision in TORCHAO_PRECISIONS:
        return "torchao"
    return "none"


def device() -> str:
    """``cuda:0`` when torch sees a GPU, else ``cpu``."""
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def load_kwargs(precision: str, *, on_cuda: bool) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments for ``precision`` (CellSkipped when this platform
    lacks what it needs). int8_pure is bitsandbytes 8-bit with ``llm_int8_threshold=0.0`` (no
    FP16 outlier path); int8_mixed keeps the default threshold (6.0), the trap being measured."""
    import torch

    if precision in BNB_PRECISIONS and importlib.util.find_spec("bitsandbytes") is None:
        raise CellSkipped(f"{precision} needs bitsandbytes, which is not installed")
    if precision in TORCHAO_PRECISIONS and importlib.util.find_spec("torchao") is None:
        raise CellSkipped(f"{precision} needs torchao, which is not installed")
    kwargs: dict[str, Any] = {}
    if on_cuda:
        kwargs["device_map"] = {"": 0}
    if precision == "fp32":
        kwargs["dtype"] = torch.float32
    elif precision == "fp16":
        kwargs["dtype"] = torch.float16
    elif precision == "bf16":
        if on_cuda and not torch.cuda.is_bf16_supported():
            raise CellSkipped("bf16 is not supported by this GPU (needs Ampere or newer)")
        kwargs["dtype"] = torch.bfloat16
    elif precision in BNB_PRECISIONS:
        from transformers import BitsAndBytesConfig

        kwargs["dtype"] = torch.float16
        if precision in ("nf4", "nf4_dq"):
            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_quant_type="nf4",
                bnb_4bit_compute_dtype=torch.float16,
                bnb_4bit_use_double_quant=precision == "nf4_dq",
            )
        elif precision == "int8_pure":
            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_8bit=True, llm_int8_threshold=0.0
            )
        else:
            kwargs["quantization_config"] = BitsAndBytesConfig(load_in_8bit=True)
    elif precision in TORCHAO_PRECISIONS:
        from transformers import TorchAoConfig

        if precision == "fp8_dynamic":
            if not on_cuda or torch.cuda.get_device_capability(0) < (8, 9):
                raise CellSkipped(
                    "fp8_dynamic needs a CUDA GPU with compute capability 8.9 or newer "
                    "(Ada, Hopper, Blackwell)"
                )
            from torchao.quantization import Float8DynamicActivationFloat8WeightConfig

            config: Any = Float8DynamicActivationFloat8WeightConfig()
        else:
            from torchao.quantization import Float8WeightOnlyConfig

            config = Float8WeightOnlyConfig()
        kwargs["dtype"] = torch.bfloat16
        kwargs["quantization_config"] = TorchAoConfig(config)
    else:
        raise CellSkipped(f"precision {precision!r} has no loader in ecoguard bench")
    return kwargs


def load_model(model_id: str, precision: str, *, on_cuda: bool) -> Any:
    """The model in ``precision``, in eval mode; CellSkipped with a one-line reason otherwise."""
    from transformers import AutoModelForCausalLM

    kwargs = load_kwargs(precision, on_cuda=on_cuda)
    try:
        model = AutoModelForCausalLM.from_pretrained(model_id, **kwargs)
    except OSError as exc:
        # transformers raises OSError for a model it cannot find, but a precision's own
        # libraries (a bitsandbytes .so) raise it too: only a model whose config does not load
        # is unavailable for every precision.
        if _config_loads(model_id):
            raise CellSkipped(f"{precision} did not load: {one_line(exc)}") from exc
        raise ModelUnavailable(f"the model did not load: {one_line(exc)}") from exc
    except Exception as exc:
        raise CellSkipped(f"{precision} did not load: {one_line(exc)}") from exc
    model.eval()
    return model


def _config_loads(model_id: str) -> bool:
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(model_id)
    except Exception as exc:
        _log.debug("ecoguard bench: the config of %s does not load: %r", model_id, exc)
        return False
    return True


def one_line(exc: BaseException, limit: int = 240) -> str:
    """``Type: first line of the message``, shortened: skip reasons must fit on a line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parameter_count(model: Any) -> int:
    """Parameters of the loaded model; transformers counts packed 4-bit weights at full size."""
    try:
        return int(model.num_parameters())
    except Exception as exc:
        _log.debug("ecoguard bench: num_parameters() failed (%r); counting tensors", exc)
        return int(sum(p.numel() for p in model.parameters()))


def load_tokenizer(model_id: str) -> Any | None:
    """The model's tokenizer, or None when it has none (random-id prompts are used then)."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model_id)
    except Exception as exc:
        _log.debug("ecoguard bench: no tokenizer for %s (%r); random-id prompts", model_id, exc)
        return None


@dataclass(frozen=True, slots=True)
class PromptSource:
    """Builds ``(batch, prompt_tokens)`` input ids: the fixed passage through the tokenizer,
    repeated to length, or (no tokenizer) random ids from a fixed seed, special ids excluded."""

    vocab_size: int
    special_ids: frozenset[int]
    tokenizer: Any | None = None
    seed: int = 0

    def input_ids(self, batch_size: int, prompt_tokens: int) -> Any:
        import torch

        if self.tokenizer is not None:
            ids = self.tokenizer(PROMPT_TEXT, add_special_tokens=False)["input_ids"]
            if ids:
                repeated = (ids * (prompt_tokens // len(ids) + 1))[:prompt_tokens]
                row = torch.tensor(repeated, dtype=torch.long)
                return row.unsqueeze(0).repeat(batch_size, 1)
        allowed = torch.tensor(
            [i for i in range(self.vocab_size) if i not in self.special_ids], dtype=torch.long
        )
        generator = torch.Generator().manual_seed(self.seed + batch_size)
        picks = torch.randint(0, len(allowed), (batch_size, prompt_tokens), generator=generator)
        return allowed[picks]


def prompt_source(model: Any, tokenizer: Any | None, seed: int) -> PromptSource:
    config = model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = int(getattr(text_config, "vocab_size", 0) or 0)
    specials: set[int] = set()
    for holder in (config, getattr(model, "generation_config", None)):
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(holder, name, None) if holder is not None else None
            if isinstance(value, int):
                specials.add(value)
            elif isinstance(value, (list, tuple)):
                specials.update(v for v in value if isinstance(v, int))
    if tokenizer is None and vocab <= len(specials):
        raise CellSkipped("the model has no tokenizer and no usable vocab_size in its config")
    return PromptSource(vocab, frozenset(specials), tokenizer, seed)


def resolved_model_id(model: str) -> str:
    """Local folders as absolute paths (the dataset is read from anywhere); hub ids as given."""
    text = model.strip()
    return os.path.abspath(text) if os.path.isdir(text) else text
