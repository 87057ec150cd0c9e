"""Helpers shared by the knowledge tests (pytest puts this folder on sys.path)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from ecoguard.deployment import Deployment, GpuSpec, ModelSpec

REPO = Path(__file__).resolve().parents[2]


def deployment(model, gpu, precision, bs=1, gen=None, prompt=None) -> Deployment:
    """A deployment of a registered model (or a size) on a GPU profile."""
    return Deployment(
        model=ModelSpec(id=model),
        gpu=GpuSpec(profile=gpu),
        precision=precision,
        batch_size=bs,
        generation_tokens=gen,
        prompt_tokens=prompt,
    )


def build_script() -> ModuleType:
    """tools/build_reference.py loaded as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location(
        "build_reference", REPO / "tools/build_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_reference"] = module  # dataclasses resolve annotations through it
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("build_reference", None)
    return module
