"""The names of the electricity regions (``data/regions.json``), readable below the knowledge
package: Settings validates ``ECOGUARD_REGION`` with them, and :func:`ecoguard.knowledge.region`
builds its GridInfo records on the same keys and aliases. Read once, on first use.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ecoguard._paths import load_data
from ecoguard.errors import UsageError

REGIONS_FILE = "regions.json"


@cache
def region_table() -> dict[str, Any]:
    """The parsed ``regions.json`` (regions with price, intensity and PUE; PUE defaults)."""
    return load_data(REGIONS_FILE)


@cache
def region_aliases() -> dict[str, str]:
    """Every accepted name, lower-cased (keys and their aliases) -> the region's key."""
    aliases: dict[str, str] = {}
    for entry in region_table()["regions"]:
        for alias in (entry["key"], *entry.get("aliases", ())):
            aliases[alias.lower()] = entry["key"]
    return aliases


def region_key(name: str) -> str:
    """The key of region ``name`` (any case, surrounding spaces ignored); UsageError lists the
    accepted keys."""
    key = region_aliases().get(str(name).strip().lower())
    if key is None:
        keys = sorted({entry["key"] for entry in region_table()["regions"]})
        raise UsageError(f"unknown region {name!r}; accepted: {', '.join(keys)}")
    return key
