"""The repository's tools/ scripts loaded as modules (they are scripts, not part of the package).

pytest puts tests/ on sys.path (the root conftest lives there), so any test imports this."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "tools"
BENCHMARKS = REPO / "benchmarks"


def load_tool(name: str, folder: Path = TOOLS) -> ModuleType:
    """``<folder>/<name>.py`` (tools/ by default) as a module, freshly executed; sys.path is
    left as it was (a script may put its own folder there to import its parts)."""
    saved = list(sys.path)
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through it
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
        sys.path[:] = saved
    return module


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (a script, not part of the package)."""
    return load_tool(name, BENCHMARKS)
