"""Part 2 of the GPU validation: the study's traps on this GPU (see gpu_validation.py).

Models are built from their architecture's config with random weights (nothing is downloaded):
energy per token follows the matmul shapes, not the weight values. Each shape is saved once as a
local checkpoint (so every precision loads through ``from_pretrained`` exactly as a user's model
does, quantized at load by bitsandbytes or torchao), then measured by ``ecoguard bench``'s own
loop (:func:`ecoguard.bench.run_bench`): warm-up, n runs, one meter window per run, CV, the
same-session FP16 baseline. Each finished cell is appended at once to ``rows.jsonl`` as a
``local`` row (the ``ecoguard bench`` schema), so a run cut short keeps it.

One caveat of random weights: LLM.int8's mixed path (threshold 6) decomposes the activation
columns above the threshold, and random weights make fewer such outliers than a trained
checkpoint, so the ``int8_mixed`` figure here is a lower bound on the trap's cost.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecoguard.bench import BenchPlan, run_bench
from ecoguard.bench import dataset as bench_data
from ecoguard.bench.loading import CellSkipped, load_model, one_line, prompt_source
from ecoguard.bench.runner import BenchResult, CellResult, generate_once
from ecoguard.config import Settings


@dataclass(frozen=True)
class Shape:
    """A model architecture to build with random weights. ``registry`` is the key of
    ecoguard's model registry that the rows stand for (energy follows the shape), or ""."""

    key: str
    family: str  # mistral | qwen2 | llama (the transformers config class)
    registry: str
    source: str  # whose config these numbers are
    config: dict[str, Any]


# The published configs' shape numbers (config.json of each model on the Hugging Face hub).
SHAPES: dict[str, Shape] = {
    "mistral-7b": Shape(
        "mistral-7b",
        "mistral",
        "mistral-7b",
        "mistralai/Mistral-7B-v0.1 config.json",
        dict(
            vocab_size=32000,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            max_position_embeddings=32768,
            sliding_window=4096,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
    ),
    "qwen2.5-1.5b": Shape(
        "qwen2.5-1.5b",
        "qwen2",
        "qwen2.5-1.5b",
        "Qwen/Qwen2.5-1.5B config.json",
        dict(
            vocab_size=151936,
            hidden_size=1536,
            intermediate_size=8960,
            num_hidden_layers=28,
            num_attention_heads=12,
            num_key_value_heads=2,
            max_position_embeddings=32768,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
    ),
    "qwen2.5-0.5b": Shape(
        "qwen2.5-0.5b",
        "qwen2",
        "qwen2.5-0.5b",
        "Qwen/Qwen2.5-0.5B config.json",
        dict(
            vocab_size=151936,
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            max_position_embeddings=32768,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
    ),
    # Tiny mode: ecoguard.testing.models' tiny configs (hidden 64, 2 layers), CPU.
    "tiny-llama": Shape("tiny-llama", "llama", "", "ecoguard.testing.models.tiny_config", {}),
    "tiny-qwen2": Shape("tiny-qwen2", "qwen2", "", "ecoguard.testing.models.tiny_config", {}),
}


@dataclass(frozen=True)
class Step:
    """One ``ecoguard bench`` session: every precision x every batch size on one shape.
    ``estimate_s``: expected seconds on one H100/H200 (tiny: on a CI CPU), model loads included,
    building the shape's checkpoint not (see :data:`BUILD_S`)."""

    name: str
    shape: str
    precisions: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    estimate_s: float
    compiled: bool = False


@dataclass(frozen=True)
class Protocol:
    prompt_tokens: int
    generation_tokens: int
    warmup: int
    runs: int
    idle_s: float


# In order of value: the 7B traps at batch 1, the 7B batch curve, the small-model quantization
# trap at 1.5B and 0.5B, then torchao float8 compiled (its compile time is the least certain).
GPU_STEPS: tuple[Step, ...] = (
    Step("7b-traps", "mistral-7b", ("fp16", "int8_mixed", "int8_pure", "nf4", "fp8_weight_only"),
         (1,), 150),
    Step("7b-batch", "mistral-7b", ("fp16",), (8, 32), 30),
    Step("1.5b-quant", "qwen2.5-1.5b", ("fp16", "nf4"), (1,), 25),
    Step("0.5b-quant", "qwen2.5-0.5b", ("fp16", "nf4"), (1,), 25),
    Step("7b-fp8-compiled", "mistral-7b", ("fp8_weight_only",), (1,), 120, compiled=True),
)  # fmt: skip
TINY_STEPS: tuple[Step, ...] = (
    Step("tiny-traps", "tiny-llama", ("fp16", "int8_mixed", "int8_pure", "nf4", "fp8_weight_only"),
         (1,), 8),
    Step("tiny-batch", "tiny-llama", ("fp16",), (8, 32), 3),
    Step("tiny-quant", "tiny-qwen2", ("fp16", "nf4"), (1,), 3),
    Step("tiny-fp8-compiled", "tiny-llama", ("fp8_weight_only",), (1,), 5, compiled=True),
)  # fmt: skip
# Seconds to build and save a shape's random-weight checkpoint (7B: 14.5 GB of FP16 written).
BUILD_S = {"mistral-7b": 45.0, "qwen2.5-1.5b": 10.0, "qwen2.5-0.5b": 5.0}

GPU_PROTOCOL = Protocol(prompt_tokens=128, generation_tokens=64, warmup=1, runs=3, idle_s=1.0)
TINY_PROTOCOL = Protocol(prompt_tokens=8, generation_tokens=4, warmup=1, runs=2, idle_s=0.05)


def build_shape(shape: Shape, folder: Path, *, on_cuda: bool) -> Path:
    """Save ``shape`` with random weights (seeded, FP16) under ``folder``; returns the folder.
    On a GPU the weights are initialised there (a 7B init on CPU takes minutes)."""
    import torch
    import transformers

    from ecoguard.testing.models import build_tiny_model

    if not shape.config:  # a tiny shape
        return build_tiny_model(folder, shape.family)
    config_class = {"mistral": transformers.MistralConfig, "qwen2": transformers.Qwen2Config}
    config = config_class[shape.family](bos_token_id=1, eos_token_id=2, **shape.config)
    torch.manual_seed(0)
    with torch.device("cuda" if on_cuda else "cpu"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    model.generation_config.eos_token_id = config.eos_token_id
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    del model
    gc.collect()
    if on_cuda:
        torch.cuda.empty_cache()
    return folder


def compiled_loader(protocol: Protocol) -> Callable[..., Any]:
    """``load_model`` for ``run_bench`` that turns on transformers' compiled decoding (a static
    KV cache makes ``generate`` run its forward through ``torch.compile``, the way torchao asks
    float8 to be served), triggers the compile with one call of the protocol's shape and checks
    that it happened. On CPU (tiny mode) the compile uses dynamo's ``eager`` backend: the
    tracing path, without inductor's code generation, which would not fit CI's minute."""

    def load(model_id: str, precision: str, *, on_cuda: bool) -> Any:
        from transformers import CompileConfig

        model = load_model(model_id, precision, on_cuda=on_cuda)
        config = CompileConfig() if on_cuda else CompileConfig(backend="eager")
        if not on_cuda:
            config._compile_all_devices = True  # transformers compiles only on accelerators
        model.generation_config.cache_implementation = "static"
        model.generation_config.compile_config = config
        ids = prompt_source(model, None, 0).input_ids(1, protocol.prompt_tokens)
        try:
            generate_once(model, ids, protocol.generation_tokens)
        except Exception as exc:
            raise CellSkipped(f"compiled generate failed: {one_line(exc)}") from exc
        if not hasattr(model, "_compiled_call"):
            raise CellSkipped("transformers did not compile the forward (no static-cache compile)")
        return model

    return load


@dataclass
class TrapsPart:
    """Runs the steps, writing ``rows.jsonl`` per cell and ``traps.json`` per step."""

    out: Path
    work: Path
    tiny: bool
    protocol: Protocol
    settings: Settings
    meter: Any  # one started NVML meter for every session (run_bench leaves it running)
    steps_done: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    built: dict[str, Path] = dataclasses.field(default_factory=dict)

    @property
    def rows_path(self) -> Path:
        return self.out / "rows.jsonl"

    def model_folder(self, shape: Shape, on_cuda: bool) -> Path:
        if shape.key not in self.built:
            self.built[shape.key] = build_shape(shape, self.work / shape.key, on_cuda=on_cuda)
        return self.built[shape.key]

    def run_step(self, step: Step, on_cuda: bool) -> dict[str, Any]:
        """One bench session. Each cell lands in rows.jsonl (measured) and traps.json (any
        status) as it ends; traps.json is written again when the step ends or is cut short."""
        shape = SHAPES[step.shape]
        started = time.monotonic()
        summary: dict[str, Any] = {
            "step": step.name,
            "shape": shape.key,
            "shape_source": shape.source,
            "compiled": step.compiled,
            "seconds": None,
            "build_seconds": None,
            "interrupted": False,
            "session": None,
            "cells": [],
        }
        self.steps_done.append(summary)
        try:
            folder = self.model_folder(shape, on_cuda)
            summary["build_seconds"] = round(time.monotonic() - started, 2)
            result = run_bench(
                self._plan(step, folder),
                settings=self.settings,
                meter=self.meter,
                on_start=lambda result: self._start(result, shape, summary),
                on_cell=lambda cell, result: self._keep_cell(cell, result, step, summary),
                load_model=compiled_loader(self.protocol) if step.compiled else None,
            )
            if result.interrupted:
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            summary["interrupted"] = True
            raise
        finally:
            summary["seconds"] = round(time.monotonic() - started, 2)
            self._write_steps()
        return summary

    def _plan(self, step: Step, folder: Path) -> BenchPlan:
        return BenchPlan(
            model=str(folder),
            precisions=step.precisions,
            batch_sizes=step.batch_sizes,
            prompt_tokens=self.protocol.prompt_tokens,
            generation_tokens=self.protocol.generation_tokens,
            runs=self.protocol.runs,
            warmup=self.protocol.warmup,
            idle_s=self.protocol.idle_s,
            backend="nvml",
        )

    def _start(self, result: BenchResult, shape: Shape, summary: dict[str, Any]) -> None:
        """Rows name the shape they stand for, not the temporary folder it was saved in."""
        suffix = " (tiny mode)" if self.tiny else ""
        result.info.model_id = f"random-weights/{shape.key}{suffix}"
        result.info.model_key = shape.registry
        summary["session"] = result.info.to_dict()
        self._write_steps()

    def _keep_cell(
        self, cell: CellResult, result: BenchResult, step: Step, summary: dict[str, Any]
    ) -> None:
        if cell.status == "measured":
            self._append_row(cell, result, step)
        summary["cells"].append(cell.to_dict())
        self._write_steps()

    def _append_row(self, cell: CellResult, result: BenchResult, step: Step) -> None:
        row = bench_data.build_row(cell, result)
        note = f"random weights, {SHAPES[step.shape].source} shape; " + row.note
        if step.compiled:
            note += "; torch.compile through transformers' static-cache generate"
            row = dataclasses.replace(row, id=row.id + "/compiled")
        if self.tiny:
            note = "TINY MODE, fake NVML driver and CPU work: not a GPU measurement; " + note
        row = dataclasses.replace(row, note=note)
        cell.row = row
        record = bench_data.row_record(row, cell, result)
        info = result.info
        record["gpu_validation"] = {
            "step": step.name,
            "shape": step.shape,
            "compiled": step.compiled,
            "tiny": self.tiny,
            "gpu_name": info.gpu_name,
            "driver_version": info.driver_version,
            "cuda_version": info.cuda_version,
            "versions": info.versions,
        }
        bench_data.append_rows(self.rows_path, [record])

    def _write_steps(self) -> None:
        text = json.dumps({"steps": self.steps_done}, indent=2, default=str)
        partial = self.out / "traps.json.partial"
        partial.write_text(text + "\n", encoding="utf-8")
        partial.replace(self.out / "traps.json")
