"""``ecoguard doctor``: what the guard sees in this environment.

Versions of torch/transformers/bitsandbytes/torchao (from package metadata), whether any is a
nightly/dev build, the GPUs visible, whether energy would be measured here (and why not), which
rules would fire for the installed stack on its own (before any model is loaded), whether the
guard is installed in this process, and fault counts.
Exit code 1 when a rule fires for the stack, else 0.

torch is imported (seconds) only where an NVIDIA driver is present but NVML did not answer:
without a driver torch.cuda sees no GPU either.
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
from dataclasses import replace
from typing import Any

from ecoguard.config import Settings
from ecoguard.deployment import Deployment, GpuSpec
from ecoguard.energy.backends import measurement_status
from ecoguard.errors import UsageError
from ecoguard.faults import fault_counts, record_fault
from ecoguard.guard import environment
from ecoguard.guard.install import is_installed
from ecoguard.knowledge import resolve_gpu
from ecoguard.rules import evaluate, nightly_versions

_log = logging.getLogger("ecoguard")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="show what the guard sees here: versions, GPUs, whether energy is measured (and "
        "why not), rules that fire for this stack",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--no-torch",
        action="store_true",
        help="do not import torch to look for CUDA GPUs (faster; GPUs then come from NVML only)",
    )
    parser.set_defaults(func=run_doctor)


def _gpus(import_torch: bool) -> list[dict[str, Any]]:
    """GPUs from NVML (when nvidia-ml-py and a driver are present), else torch.cuda."""
    found: list[dict[str, Any]] = []
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                name = pynvml.nvmlDeviceGetName(handle)
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                found.append(
                    {
                        "index": index,
                        "name": name.decode() if isinstance(name, bytes) else name,
                        "vram_gb": round(memory.total / 1e9, 1),
                        "via": "nvml",
                    }
                )
        finally:
            pynvml.nvmlShutdown()
        return found
    except Exception as exc:  # no NVML library or driver: try torch
        _log.debug("ecoguard doctor: NVML unavailable (%r)", exc)
    if not import_torch or not nvidia_driver_present():
        return found  # no driver: torch.cuda would find nothing, after seconds of importing
    try:
        import torch

        if torch.cuda.is_available():
            for index in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(index)
                found.append(
                    {
                        "index": index,
                        "name": props.name,
                        "vram_gb": round(props.total_memory / 1e9, 1),
                        "compute_capability": [props.major, props.minor],
                        "via": "torch.cuda",
                    }
                )
    except Exception as exc:  # torch absent or CUDA broken: no GPU seen
        _log.debug("ecoguard doctor: torch.cuda unavailable (%r)", exc)
    return found


def nvidia_driver_present() -> bool:
    """Whether this machine shows an NVIDIA driver: its /proc entry or device files (Linux), the
    WSL GPU device, or (elsewhere) any platform at all, since these checks are Linux's."""
    if not os.path.isdir("/proc") and not os.path.isdir("/dev"):
        return True
    return (
        os.path.exists("/proc/driver/nvidia/version")
        or bool(glob.glob("/dev/nvidia[0-9]*"))
        or os.path.exists("/dev/dxg")
    )


def _measurement() -> dict[str, Any]:
    """Whether a meter started here from the ECOGUARD_* environment would measure energy."""
    try:
        status = measurement_status(Settings.from_env())
    except UsageError as exc:  # an ECOGUARD_* variable the settings refuse
        return {"on": False, "backend": None, "gpus": 0, "tier": "unmeasured", "reason": str(exc)}
    return {
        "on": status.on,
        "backend": status.backend,
        "gpus": status.gpus,
        "tier": status.tier,
        "reason": status.reason,
    }


def doctor_report(*, import_torch: bool = True) -> dict[str, Any]:
    """The doctor's findings as a JSON-ready dict."""
    versions = environment.software_versions()
    gpus = _gpus(import_torch)
    gpu = GpuSpec()
    if gpus:
        first = gpus[0]
        fields: dict[str, Any] = {"name": first["name"], "vram_gb": first["vram_gb"]}
        if "compute_capability" in first:
            fields["compute_capability"] = tuple(first["compute_capability"])
        try:
            profile = resolve_gpu(first["name"])
        except UsageError:  # not in the GPU table: the driver's facts only
            profile = None
        except Exception as exc:  # tables unreadable: the driver's facts, and a counted fault
            record_fault("guard.doctor_gpu", exc)
            profile = None
        if profile is None:
            gpu = GpuSpec(count=len(gpus), **fields)
        else:  # the table's profile, with the driver's own name and VRAM
            gpu = profile.to_gpu_spec(name=first["name"], count=len(gpus))
            gpu = replace(gpu, vram_gb=first["vram_gb"])
    deployment = Deployment(software=versions, gpu=gpu)
    findings = evaluate(deployment)
    return {
        "versions": {
            "torch": versions.torch,
            "transformers": versions.transformers,
            "bitsandbytes": versions.bitsandbytes,
            "torchao": versions.torchao,
        },
        "nightly": nightly_versions(deployment),
        "gpus": gpus,
        "measurement": _measurement(),
        "guard_installed": is_installed(),
        "findings": [finding.to_dict() for finding in findings],
        "faults": fault_counts(),
    }


def run_doctor(args: argparse.Namespace) -> int:
    report = doctor_report(import_torch=not args.no_torch)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 1 if report["findings"] else 0
    print("ecoguard doctor")
    for name, version in report["versions"].items():
        flag = "  (nightly/dev build)" if name in report["nightly"] else ""
        print(f"  {name:<13} {version or 'not installed'}{flag}")
    if report["gpus"]:
        for gpu in report["gpus"]:
            print(f"  GPU {gpu['index']}: {gpu['name']}, {gpu['vram_gb']} GB (via {gpu['via']})")
    else:
        print("  GPUs         none seen (NVML and torch.cuda found nothing)")
    print(f"  measurement  {_measurement_line(report['measurement'])}")
    # "installed" would read as the package; this is whether the guard is on in this process.
    guard = (
        "on in this process"
        if report["guard_installed"]
        else "off in this process (turn it on with `import ecoguard.auto` or ecoguard.install())"
    )
    print(f"  guard        {guard}")
    faults = report["faults"]
    print(f"  faults       {sum(faults.values())}" + (f" {faults}" if faults else ""))
    if report["findings"]:
        print("  rules that fire for this stack:")
        for finding in report["findings"]:
            print(f"    [{finding['mood']}] {finding['rule']}: {finding['message']}")
            print(f"        fix: {finding['fix']}")
        return 1
    print("  no rule fires for this stack before a model is loaded")
    return 0


def _measurement_line(measurement: dict[str, Any]) -> str:
    if measurement["on"]:
        gpus = measurement["gpus"]
        what = "simulated GPU" if measurement["tier"] == "simulated" else "GPU"
        return (
            f"on: {measurement['backend']} backend, {gpus} {what}{'s' if gpus != 1 else ''}"
            f" (figures say {measurement['tier']})"
        )
    return (
        f"off: {measurement['reason']}. For simulated figures without a GPU set"
        " ECOGUARD_BACKEND=simulated"
    )
