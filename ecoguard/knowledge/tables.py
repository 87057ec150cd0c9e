"""Lazy, cached loaders for the shipped knowledge tables, and the look-ups built on them.

Every table is a JSON file under ``ecoguard._paths.data_dir()`` read on first use and cached
for the life of the process, so ``import ecoguard.knowledge`` costs nothing and the first
look-up pays a few milliseconds. Local rows (``tier == "local"``) come from the persistent local
dataset that ``ecoguard bench`` writes (:func:`local_data_path`, JSON lines, re-read when the file
changes) and from :func:`add_local_rows`; they are kept apart from the shipped rows and win over
them.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import threading
from functools import cache
from pathlib import Path
from stat import S_ISREG

from ecoguard._paths import load_data
from ecoguard.deployment import normalize_precision
from ecoguard.errors import UnknownGpuError, UnknownModelError, UsageError
from ecoguard.faults import record_fault
from ecoguard.knowledge.records import (
    Equivalent,
    GpuProfile,
    GridInfo,
    ModelInfo,
    ReferenceRow,
)
from ecoguard.regions import region_key, region_table

_ROW_FIELDS = frozenset(ReferenceRow.__dataclass_fields__)
_local_rows: list[ReferenceRow] = []
_local_lock = threading.Lock()
# (path, mtime_ns, size) of the local dataset file -> its rows; re-read only when it changes.
_file_cache: tuple[tuple[str, int, int], tuple[ReferenceRow, ...]] | None = None

LOCAL_DATA_ENV = "ECOGUARD_LOCAL_DATA"
# A bench row is about 1 KB: 64 MiB holds tens of thousands of them, and bounds what a wrong
# path (a device file, a huge log) can cost.
LOCAL_DATA_MAX_BYTES = 64 * 1024 * 1024
_log = logging.getLogger("ecoguard.knowledge")


@cache
def _shipped_rows() -> tuple[ReferenceRow, ...]:
    rows = load_data("reference_rows.json")["rows"]
    return tuple(ReferenceRow(**{k: v for k, v in row.items() if k in _ROW_FIELDS}) for row in rows)


def local_data_path() -> Path:
    """The persistent local dataset (JSON lines, one ReferenceRow per line, tier ``local``):
    ``$ECOGUARD_LOCAL_DATA``, else ``$XDG_DATA_HOME/ecoguard/local_rows.jsonl`` (``~/.local/share``
    when XDG_DATA_HOME is unset). Read on every look-up that needs rows, cached by mtime and size."""
    explicit = os.environ.get(LOCAL_DATA_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(base) / "ecoguard" / "local_rows.jsonl"


def read_local_rows(path: Path) -> tuple[ReferenceRow, ...]:
    """Rows of a local dataset file. Unknown keys are ignored (the bench stores extras such as
    per-run values); a line that does not parse or is not tier ``local`` is skipped and counted as
    a fault (a torn last line after a crash must not hide the others); a later line with the same
    id replaces an earlier one."""
    rows: dict[str, ReferenceRow] = {}
    with path.open("rb") as handle:
        for raw in handle:
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as exc:  # one bad byte costs its line, not the file
                record_fault("knowledge.local_rows", exc)
                continue
            if not line:
                continue
            try:
                data = json.loads(line)
                row = ReferenceRow(**{k: v for k, v in data.items() if k in _ROW_FIELDS})
            except (ValueError, TypeError, AttributeError) as exc:
                record_fault("knowledge.local_rows", exc)
                continue
            if row.tier != "local":
                record_fault("knowledge.local_rows", ValueError(f"tier {row.tier!r} in {path}"))
                continue
            rows[row.id] = row
    return tuple(rows.values())


def _file_local_rows() -> tuple[ReferenceRow, ...]:
    global _file_cache
    path = local_data_path()
    try:
        stat = path.stat()
    except OSError:
        return ()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    cached = _file_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    refused = _refused_local_file(path, stat)
    if refused:
        # A fifo would block the reader forever and /dev/zero would fill memory: only a plain
        # file of a sane size is read. Said once per change of the file, then cached as empty.
        record_fault("knowledge.local_rows", UsageError(refused))
        _log.warning("ecoguard: %s", refused)
        _file_cache = (key, ())
        return ()
    try:
        rows = read_local_rows(path)
    except OSError as exc:  # unreadable file: the shipped data still answers
        record_fault("knowledge.local_rows", exc)
        rows = ()
    _file_cache = (key, rows)
    return rows


def _refused_local_file(path: Path, stat: os.stat_result) -> str | None:
    """Why the local dataset at ``path`` is not read, or None when it is a plain file of at most
    :data:`LOCAL_DATA_MAX_BYTES`."""
    if not S_ISREG(stat.st_mode):
        return (
            f"local dataset {path} ({LOCAL_DATA_ENV}) is not a regular file; it was not read "
            "(accepted: a JSON-lines file written by `ecoguard bench`)"
        )
    if stat.st_size > LOCAL_DATA_MAX_BYTES:
        return (
            f"local dataset {path} ({LOCAL_DATA_ENV}) is {stat.st_size:,} bytes, over the "
            f"{LOCAL_DATA_MAX_BYTES:,}-byte limit; it was not read"
        )
    return None


# (the local file's rows object, _local_version, the combined tuple)
_combined_cache: tuple[tuple[ReferenceRow, ...], int, tuple[ReferenceRow, ...]] | None = None
_local_version = 0


def reference_rows() -> tuple[ReferenceRow, ...]:
    """All compiled rows, then the local dataset's rows, then ``local`` rows added in-process.

    Called many times per answer, so the concatenation is cached until the local file or the
    in-process rows change (one stat of the local file per call remains)."""
    global _combined_cache
    file_rows = _file_local_rows()
    with _local_lock:
        cached = _combined_cache
        if cached is not None and cached[0] is file_rows and cached[1] == _local_version:
            return cached[2]
        combined = _shipped_rows() + file_rows + tuple(_local_rows)
        _combined_cache = (file_rows, _local_version, combined)
    return combined


def add_local_rows(rows: list[ReferenceRow] | tuple[ReferenceRow, ...]) -> None:
    """Register rows measured on this machine (tier ``local``); the estimator prefers them."""
    for row in rows:
        if row.tier != "local":
            raise UsageError(f"local rows must have tier 'local', got {row.tier!r} ({row.id})")
    with _local_lock:
        global _local_version
        _local_rows.extend(rows)
        _local_version += 1


def clear_local_rows() -> None:
    with _local_lock:
        global _local_version
        _local_rows.clear()
        _local_version += 1


def _profiles(entries: list[dict]) -> dict[str, GpuProfile]:
    out = {}
    for entry in entries:
        entry = dict(entry)
        entry["compute_capability"] = tuple(entry["compute_capability"])
        entry["nvml_names"] = tuple(entry["nvml_names"])
        entry["nicknames"] = tuple(entry.get("nicknames", ()))
        out[entry["key"]] = GpuProfile(**entry)
    return out


@cache
def gpu_profiles() -> dict[str, GpuProfile]:
    """GPU profiles keyed by profile key (``a800``, ``rtx5090``, ...)."""
    return _profiles(load_data("gpus.json")["gpus"])


@cache
def spec_sheet_cards() -> dict[str, GpuProfile]:
    """NVIDIA cards outside the GPU profiles, from their vendor specification sheets
    (``gpu_cards.json``; no measured idle power), keyed by folded name (``4080super``)."""
    return _profiles(load_data("gpu_cards.json")["cards"])


@cache
def accelerator_vendors() -> tuple[dict, ...]:
    """Accelerator families with no reference row (``gpu_cards.json``): key, name, the tool that
    reads their power (``{en, zh}``), and the words that name them (``tokens``, ``substrings``)."""
    return tuple(load_data("gpu_cards.json")["vendors"])


def _fold(text: str) -> str:
    """Lower-case and drop spaces, dashes, underscores and vendor words for name matching."""
    text = text.lower()
    for word in ("nvidia", "geforce", "tesla"):
        text = text.replace(word, "")
    return re.sub(r"[\s\-_]+", "", text)


@cache
def _gpu_aliases() -> dict[str, str]:
    aliases: dict[str, str] = {}
    for key, profile in gpu_profiles().items():
        for name in (key, profile.name, *profile.nvml_names, *profile.nicknames):
            aliases.setdefault(_fold(name), key)
    return aliases


def resolve_gpu(name: str) -> GpuProfile:
    """A profile from a key, a nickname (``5090``, ``4090D``, ``H100``) or an NVML name
    (``NVIDIA H100 80GB HBM3`` -> h100_sxm). Raises UnknownGpuError with the nearest names."""
    if not isinstance(name, str) or not name.strip():
        raise UnknownGpuError(str(name), [])
    profiles = gpu_profiles()
    if name in profiles:
        return profiles[name]
    aliases = _gpu_aliases()
    folded = _fold(name)
    if folded in aliases:
        return profiles[aliases[folded]]
    # NVML names carry suffixes we do not list (memory size, form factor): accept the longest
    # alias that the given name starts with, if it is specific enough to be unambiguous.
    prefixes = [a for a in aliases if len(a) >= 4 and folded.startswith(a)]
    if prefixes:
        return profiles[aliases[max(prefixes, key=len)]]
    close = difflib.get_close_matches(folded, list(aliases), n=6, cutoff=0.5)
    suggestions: list[str] = []
    for alias in close:
        key = aliases[alias]
        if key not in suggestions:
            suggestions.append(key)
    if not suggestions:
        suggestions = [k for k in profiles if folded and (folded in _fold(k) or _fold(k) in folded)]
    raise UnknownGpuError(name, suggestions[:4])


@cache
def model_registry() -> dict[str, ModelInfo]:
    """The model registry keyed by registry key (``qwen2.5-7b``)."""
    out = {}
    for entry in load_data("models.json")["models"]:
        out[entry["key"]] = ModelInfo(
            id=entry["key"],
            params_b=float(entry["params_b"]),
            family=entry["family"],
            layers=entry["layers"],
            hidden_size=entry["hidden_size"],
            kv_heads=entry["kv_heads"],
            head_dim=entry["head_dim"],
            context_window=entry["context_window"],
            source=entry["source"],
            hf_id=entry["hf_id"],
        )
    return out


@cache
def _model_aliases() -> dict[str, str]:
    aliases = {}
    for entry in load_data("models.json")["models"]:
        for name in (entry["key"], entry["hf_id"].split("/")[-1], *entry.get("aliases", ())):
            aliases[_model_fold(name)] = entry["key"]
    return aliases


def _model_fold(text: str) -> str:
    text = text.strip().lower().split("/")[-1]
    text = text.replace("_", "-").replace(" ", "-")
    text = re.sub(r"^meta-llama-", "llama-", text)
    return text


_SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.IGNORECASE)


def parse_params_b(text: str) -> float | None:
    """A parameter count in billions from text such as ``7B``, ``1.5b``, ``135M`` or
    ``Qwen2.5-7B-Instruct``; None when no size is written."""
    # The last size in the name is the model's (``Qwen2.5-7B`` -> 7, not 2.5).
    matches = list(_SIZE.finditer(text.replace("_", "-").replace("-", " ")))
    if not matches:
        return None
    match = matches[-1]
    value = float(match.group(1))
    return value / 1000.0 if match.group(2).lower() == "m" else value


def resolve_model(text: str) -> ModelInfo:
    """Registry entry for a model id (``Qwen/Qwen2.5-7B-Instruct``, ``mistral-7b``), or a
    size-only ModelInfo for a parameter count (``7B``, ``1.5b``) or an unknown id that states one.
    Raises UnknownModelError when neither works."""
    if not isinstance(text, str) or not text.strip():
        raise UnknownModelError(
            "empty model name; give an id like Qwen/Qwen2.5-7B or a size like 7B"
        )
    registry = model_registry()
    aliases = _model_aliases()
    folded = _model_fold(text)
    if folded in aliases:
        return registry[aliases[folded]]
    # ``Qwen2.5-7B-Instruct``, ``Mistral-7B-Instruct-v0.2``: the longest key the name starts with.
    starts = [a for a in aliases if folded.startswith(a)]
    if starts:
        return registry[aliases[max(starts, key=len)]]
    local = _local_model(text)
    if local is not None:
        return local
    params = parse_params_b(text)
    if params is not None:
        if not 0 < params <= 2000:
            raise UnknownModelError(f"model size {params} B is out of range (0 to 2000 B)")
        return ModelInfo(id=text.strip(), params_b=params, source="size parsed from the name")
    near = difflib.get_close_matches(folded, list(aliases), n=3, cutoff=0.6)
    hint = f" Did you mean: {', '.join(aliases[n] for n in near)}?" if near else ""
    raise UnknownModelError(
        f"unknown model {text!r} and no size in its name.{hint} Give a registry id "
        "(`ecoguard data --models`) or a parameter count such as 7B."
    )


def _local_model(text: str) -> ModelInfo | None:
    """A model measured by ``ecoguard bench`` (a local path or an id outside the registry): its
    local rows name it in ``model_id`` and carry the counted parameters."""
    wanted = {text.strip()}
    if os.path.exists(text.strip()):
        wanted.add(os.path.abspath(text.strip()))
    for row in reference_rows():
        if row.tier == "local" and row.model_id in wanted and row.params_b:
            return ModelInfo(
                id=row.model_id, params_b=row.params_b, source="local dataset (ecoguard bench)"
            )
    return None


@cache
def _regions() -> tuple[dict[str, GridInfo], dict]:
    data = region_table()
    grids = {}
    for entry in data["regions"]:
        grids[entry["key"]] = GridInfo(
            key=entry["key"],
            name=entry["name"],
            price_usd_per_kwh=float(entry["price_usd_per_kwh"]),
            gco2_per_kwh=float(entry["gco2_per_kwh"]),
            pue=float(entry["pue"]),
            source=entry["source"],
        )
    return grids, data["pue"]


def regions() -> dict[str, GridInfo]:
    return dict(_regions()[0])


def pue_defaults() -> dict[str, float]:
    """``{"cloud": 1.1, "local": 1.0}``: power usage effectiveness by deployment kind."""
    pue = _regions()[1]
    return {"cloud": float(pue["cloud"]), "local": float(pue["local"])}


def region(name: str) -> GridInfo:
    """Grid price and intensity for ``us``, ``china``/``cn``, ``eu``, ``uk``, ``fr``, ``de``,
    ``in``, ``jp``, ``ca``. UsageError lists the accepted names."""
    return _regions()[0][region_key(name)]


@cache
def _equivalent_factors() -> tuple[dict, ...]:
    return tuple(load_data("equivalents.json")["equivalents"])


def equivalents(energy_kwh: float, co2_kg: float) -> list[Equivalent]:
    """Real-world comparisons: km driven by an average car (from CO2), smartphone charges and
    LED-bulb hours (from energy). Factors and sources in ``data/equivalents.json``."""
    if energy_kwh < 0 or co2_kg < 0:
        raise UsageError("energy and CO2 must be >= 0")
    out = []
    for entry in _equivalent_factors():
        amount = co2_kg if entry["basis"] == "co2" else energy_kwh
        out.append(
            Equivalent(
                key=entry["key"],
                label=entry["label"],
                value=amount / entry["factor"],
                factor=entry["factor"],
                unit=entry["unit"],
                basis=entry["basis"],
                source=entry["source"],
            )
        )
    return out


def find_rows(
    *,
    gpu: str | None = None,
    model: str | None = None,
    precision: str | None = None,
    batch_size: int | None = None,
    tier: str | None = None,
) -> list[ReferenceRow]:
    """Rows matching every given filter. ``gpu`` and ``model`` accept anything resolve_gpu /
    resolve_model accept (a model matches by registry key, or by size for a size-only model);
    ``precision`` accepts the usual aliases."""
    gpu_key = resolve_gpu(gpu).key if gpu is not None else None
    model_key: str | None = None
    model_params: float | None = None
    if model is not None:
        info = resolve_model(model)
        if info.id in model_registry():
            model_key = info.id
        else:
            model_params = info.params_b
    prec = normalize_precision(precision) if precision is not None else None
    out = []
    for row in reference_rows():
        if gpu_key is not None and row.gpu != gpu_key:
            continue
        if model_key is not None and row.model_key != model_key:
            continue
        if model_params is not None and abs(row.params_b - model_params) > 1e-6:
            continue
        if prec is not None and row.precision != prec:
            continue
        if batch_size is not None and row.batch_size != batch_size:
            continue
        if tier is not None and row.tier != tier:
            continue
        out.append(row)
    return out
