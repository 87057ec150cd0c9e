"""Where ecoguard's shipped files live, in a wheel and in a source checkout."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

_PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def data_dir() -> Path:
    """The compiled reference data: ``ecoguard/_data`` in a wheel, ``data/`` in a checkout."""
    return _first_existing("_data", "data")


@cache
def grafana_dir() -> Path:
    """Dashboards, provisioning and Prometheus rules: ``ecoguard/_grafana`` or ``grafana/``."""
    return _first_existing("_grafana", "grafana")


def load_data(name: str) -> Any:
    """The parsed JSON file ``name`` of the compiled data; a missing file says how to rebuild."""
    path = data_dir() / name
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"ecoguard data file {path} is missing; rebuild with tools/build_reference.py"
        ) from None


def _first_existing(packaged: str, checkout: str) -> Path:
    inside = _PACKAGE_DIR / packaged
    if inside.is_dir():
        return inside
    return _PACKAGE_DIR.parent / checkout
