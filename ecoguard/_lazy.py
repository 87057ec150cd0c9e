"""Public names a package exports from submodules imported on first use (PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, table: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: a name in ``table`` (name -> module)
    is imported from its module on first access and kept in ``namespace`` (the package's
    globals), so later reads cost nothing; any other name is an AttributeError."""

    def getattr_(name: str) -> Any:
        module_name = table.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(table))

    return getattr_, dir_
