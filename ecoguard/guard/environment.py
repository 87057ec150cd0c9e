"""What the guard can learn about the process without importing anything heavy.

Software versions come from package metadata (``importlib.metadata``), never by importing torch
or transformers. The GPU comes from the meter when one is running (it already talks to NVML or a
simulated profile), else from ``torch.cuda`` only if torch is already imported, else it is
unknown. Whether the process is interactive decides whether ``batch-size-one`` may fire.
"""

from __future__ import annotations

import sys
from functools import cache
from importlib import metadata
from typing import Any

from ecoguard import energy
from ecoguard.deployment import GpuSpec, SoftwareVersions
from ecoguard.errors import UsageError
from ecoguard.faults import record_fault
from ecoguard.knowledge import resolve_gpu

TRACKED_PACKAGES: tuple[str, ...] = ("torch", "transformers", "bitsandbytes", "torchao")


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name`` or None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    except Exception as exc:  # a broken dist-info must not break the caller
        record_fault("guard.versions", exc)
        return None


@cache
def software_versions() -> SoftwareVersions:
    """torch/transformers/bitsandbytes/torchao versions (cached: they do not change in-process)."""
    return SoftwareVersions(**{name: package_version(name) for name in TRACKED_PACKAGES})


def is_interactive() -> bool:
    """True in a REPL, ``python -i`` or IPython/Jupyter, where one-at-a-time calls are normal."""
    if sys.flags.interactive or hasattr(sys, "ps1"):
        return True
    ipython = sys.modules.get("IPython")
    if ipython is not None:
        try:
            return ipython.get_ipython() is not None
        except Exception as exc:
            record_fault("guard.interactive", exc)
            return False
    return False


def _profile(name: str | None) -> Any:
    """The knowledge table's GpuProfile for ``name``, or None (unknown GPU or tables absent:
    the caller keeps what the driver said)."""
    if not name:
        return None
    try:
        return resolve_gpu(name)
    except UsageError:  # a GPU the table does not know
        return None
    except Exception as exc:  # tables unreadable
        record_fault("guard.gpu_profile", exc)
        return None


def _gpu_from_meter() -> GpuSpec | None:
    meter = energy.get_meter()
    if meter is None:
        return None
    states = meter.gpu_states()
    if not states:
        return None
    first = states[0]
    profile = _profile(getattr(first, "profile", None) or first.name)
    if profile is None:
        return GpuSpec(name=first.name, count=len(states))
    return profile.to_gpu_spec(name=first.name, count=len(states))


def _gpu_from_torch() -> GpuSpec | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if not torch.cuda.is_available():
        return None
    count = torch.cuda.device_count()
    props = torch.cuda.get_device_properties(0)
    profile = _profile(props.name)
    if profile is not None:
        return profile.to_gpu_spec(name=props.name, count=count)
    return GpuSpec(
        name=props.name,
        count=count,
        compute_capability=(props.major, props.minor),
        vram_gb=props.total_memory / 1e9,
    )


def detect_gpu() -> GpuSpec:
    """The GPU this process runs on: the meter's view, else torch.cuda's, else unknown."""
    for probe in (_gpu_from_meter, _gpu_from_torch):
        try:
            found = probe()
        except Exception as exc:
            record_fault("guard.gpu", exc)
            found = None
        if found is not None:
            return found
    return GpuSpec()
