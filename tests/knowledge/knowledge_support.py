"""Helpers shared by the knowledge tests (pytest puts this folder on sys.path)."""

from __future__ import annotations

from types import ModuleType

from tool_scripts import load_tool

from ecoguard.deployment import Deployment, GpuSpec, ModelSpec


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
    return load_tool("build_reference")
