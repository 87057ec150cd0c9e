"""The MCP resources: what an agent reads rather than calls (provenance, rules, GPU list)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mcp.server.mcpserver.exceptions import ResourceError

from ecoguard._paths import data_dir
from ecoguard.knowledge import gpu_profiles
from ecoguard.rules import RULES

PROVENANCE_URI = "ecoguard://data/provenance"
RULES_URI = "ecoguard://rules"
GPUS_URI = "ecoguard://data/gpus"


@dataclass(frozen=True)
class ResourceSpec:
    """One resource: where it is (``uri``), how it is listed, and the function that reads it."""

    uri: str
    name: str
    title: str
    description: str
    mime_type: str
    read: Callable[[], str]


def provenance_text() -> str:
    path = data_dir() / "README.md"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResourceError(f"the dataset provenance file is missing ({path}): {exc}") from None


def rules_json() -> str:
    fields = ("id", "title", "summary", "why", "fix", "changes_outputs", "stage")
    return _listing("rules", RULES.values(), fields)


def gpus_json() -> str:
    fields = ("key", "name", "architecture", "vram_gb", "nicknames", "bf16", "fp8")
    return _listing("gpus", gpu_profiles().values(), fields)


def _listing(key: str, items: Iterable[object], fields: tuple[str, ...]) -> str:
    """``{key: [{field: value, ...}, ...]}`` as indented JSON, fields in the order given."""
    rows = [{field: getattr(item, field) for field in fields} for item in items]
    return json.dumps({key: rows}, indent=2)


RESOURCES: tuple[ResourceSpec, ...] = (
    ResourceSpec(
        PROVENANCE_URI,
        name="provenance",
        title="Reference data: provenance, licences and row schema",
        description="Where every figure comes from (EcoCompute, Zenodo 10.5281/zenodo.19647290, "
        "CC BY 4.0), the licence each source states, and what each row field and tier means.",
        mime_type="text/markdown",
        read=provenance_text,
    ),
    ResourceSpec(
        RULES_URI,
        name="rules",
        title="Energy-trap rules",
        description="Every rule id with its title, what it catches, why, and the fix.",
        mime_type="application/json",
        read=rules_json,
    ),
    ResourceSpec(
        GPUS_URI,
        name="gpus",
        title="Known GPU profiles",
        description="GPU profile keys, names, nicknames, architecture and VRAM.",
        mime_type="application/json",
        read=gpus_json,
    ),
)
