"""The NVML backend: readings from an NVIDIA driver through nvidia-ml-py.

``pynvml`` is imported inside :meth:`NvmlBackend.probe`, so importing this module never loads it.
Energy comes from the total-energy counter (Volta and newer; mJ), instant power from field 186
(``NVML_FI_DEV_POWER_INSTANT``; mW) with ``nvmlDeviceGetPowerUsage`` (often a 1 s mean) as the
last resort; both become joules and watts here. NVML errors become
:class:`~ecoguard.errors.NotSupportedError`, :class:`~ecoguard.errors.DeviceLostError` or
:class:`~ecoguard.errors.BackendError`. ``CUDA_VISIBLE_DEVICES`` is respected: visible index ``i``
is the ``i``-th device it names, by index or UUID, exactly as CUDA numbers them in the process.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from ecoguard.energy.device import DeviceInfo
from ecoguard.errors import BackendError, DeviceLostError, NotSupportedError

_log = logging.getLogger("ecoguard.energy")

# NVML return codes this module cares about (values from nvml.h; stable across drivers).
_NVML_ERROR_NOT_SUPPORTED = 3
_NVML_ERROR_FUNCTION_NOT_FOUND = 13
_NVML_ERROR_GPU_IS_LOST = 15
_NVML_ERROR_RESET_REQUIRED = 16
_NVML_ERROR_GPU_NOT_FOUND = 28
_NVML_FI_DEV_POWER_INSTANT = 186
_LOST_CODES = frozenset(
    {_NVML_ERROR_GPU_IS_LOST, _NVML_ERROR_RESET_REQUIRED, _NVML_ERROR_GPU_NOT_FOUND}
)
_UNSUPPORTED_CODES = frozenset({_NVML_ERROR_NOT_SUPPORTED, _NVML_ERROR_FUNCTION_NOT_FOUND})

# nvmlDeviceArchitecture_t -> the architecture names used across ecoguard.
_NVML_ARCHITECTURES: dict[int, str] = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
}


def parse_visible_devices(value: str | None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as a list of entries (indices or UUID prefixes); None if unset.

    CUDA stops at the first entry it cannot parse; an empty string hides every device."""
    if value is None:
        return None
    entries: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            break
        if entry.isdigit() or entry.startswith(("GPU-", "MIG-")):
            entries.append(entry)
        elif entry.startswith("-") and entry[1:].isdigit():
            break  # a negative index ends the list in CUDA
        else:
            break
    return entries


class NvmlBackend:
    """Readings from an NVIDIA driver through nvidia-ml-py."""

    name = "nvml"
    tier = "live"
    counter_quantised = True

    def __init__(self, pynvml: Any, handles: list[Any], physical: list[int]) -> None:
        self._nvml = pynvml
        self._handles = handles
        self._physical = physical  # visible index -> physical NVML index (for labels, logs)
        self._no_counter: set[int] = set()
        self._no_instant: set[int] = set()
        self._info: dict[int, DeviceInfo] = {}
        self._read_instant_power = _instant_power_reader(pynvml)
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def probe(cls, *, visible_devices: str | None = None) -> NvmlBackend:
        """Initialise NVML and enumerate the visible devices; BackendError if it cannot."""
        try:
            import pynvml
        except ImportError as exc:
            raise BackendError(
                "nvidia-ml-py is not installed (pip install nvidia-ml-py; from a clone: "
                "pip install -e '.[nvml]')"
            ) from exc
        try:
            pynvml.nvmlInit()
        except Exception as exc:
            raise _map_error(exc, "nvmlInit") from exc
        try:
            count = pynvml.nvmlDeviceGetCount()
            all_handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            uuids = [_text(pynvml.nvmlDeviceGetUUID(h)) for h in all_handles]
        except Exception as exc:
            _safe_shutdown(pynvml)
            raise _map_error(exc, "device enumeration") from exc
        if visible_devices is None:
            visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        entries = parse_visible_devices(visible_devices)
        physical: list[int] = []
        if entries is None:
            physical = list(range(count))
        else:
            for entry in entries:
                match = _match_visible(entry, uuids)
                if match is None or match in physical:
                    break  # CUDA hides everything from the first invalid or repeated entry
                physical.append(match)
        return cls(pynvml, [all_handles[i] for i in physical], physical)

    def device_count(self) -> int:
        return len(self._handles)

    def device_info(self, index: int) -> DeviceInfo:
        cached = self._info.get(index)
        if cached is not None:
            return cached
        nvml, handle = self._nvml, self._handle(index)
        name = _text(self._call("nvmlDeviceGetName", handle))
        uuid = _text(self._call("nvmlDeviceGetUUID", handle))
        architecture = _optional(
            lambda: _NVML_ARCHITECTURES.get(int(nvml.nvmlDeviceGetArchitecture(handle)))
        )
        capability = _optional(lambda: tuple(nvml.nvmlDeviceGetCudaComputeCapability(handle)))
        memory = _optional(lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total))
        limit_mw = _optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        info = DeviceInfo(
            index=index,
            name=name,
            uuid=uuid,
            architecture=architecture,
            compute_capability=capability,  # type: ignore[arg-type]
            memory_total_bytes=memory,
            power_limit_w=None if limit_mw is None else float(limit_mw) / 1000.0,
        )
        self._info[index] = info
        return info

    def energy_j(self, index: int) -> float | None:
        if index in self._no_counter:
            return None
        try:
            millijoules = self._call("nvmlDeviceGetTotalEnergyConsumption", self._handle(index))
        except NotSupportedError:
            self._no_counter.add(index)  # pre-Volta or virtualised: never ask again
            return None
        return float(millijoules) / 1000.0

    def power_w(self, index: int) -> float:
        handle = self._handle(index)
        if index not in self._no_instant:
            try:
                if self._read_instant_power is not None:
                    try:
                        field = self._read_instant_power(handle)
                    except Exception as exc:
                        raise _map_error(exc, "nvmlDeviceGetFieldValues") from exc
                else:
                    values = self._call(
                        "nvmlDeviceGetFieldValues", handle, [_NVML_FI_DEV_POWER_INSTANT]
                    )
                    field = values[0]
                code = int(field.nvmlReturn)
                if code == 0:
                    return _field_number(field) / 1000.0
                if code in _LOST_CODES:
                    raise DeviceLostError(f"GPU {index} lost (field 186)")
                if code in _UNSUPPORTED_CODES:
                    self._no_instant.add(index)
                # Any other code is a failure of this one read: fall back for it alone, not for
                # the rest of the process.
            except NotSupportedError:
                self._no_instant.add(index)
        # Last resort: the driver's (often 1 s averaged) power reading.
        return float(self._call("nvmlDeviceGetPowerUsage", handle)) / 1000.0

    def power_method(self, index: int) -> str:
        return "power_usage" if index in self._no_instant else "instant_power"

    def physical_index(self, index: int) -> int:
        return self._physical[index]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _safe_shutdown(self._nvml)

    def _handle(self, index: int) -> Any:
        if not 0 <= index < len(self._handles):
            raise BackendError(f"no visible GPU {index} (visible: {len(self._handles)})")
        return self._handles[index]

    def _call(self, function: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, function)(*args)
        except Exception as exc:
            raise _map_error(exc, function) from exc


def _instant_power_reader(pynvml: Any) -> Callable[[Any], Any] | None:
    """``handle -> field value`` of instant power (field 186): ``nvmlDeviceGetFieldValues``
    called directly. pynvml's wrapper builds its request through a caught TypeError each time:
    4 of the 6.5 us a power read costs, and the meter reads power at both edges of every call
    (benchmarks/measured_call_overhead.py). None where ``pynvml`` is not the real module (a
    test's stand-in) or the driver lacks the function: power_w then calls pynvml's wrapper."""
    get_function = getattr(pynvml, "_nvmlGetFunctionPointer", None)
    field_type = getattr(pynvml, "c_nvmlFieldValue_t", None)
    check = getattr(pynvml, "_nvmlCheckReturn", None)
    if get_function is None or field_type is None or check is None:
        return None
    try:
        function = get_function("nvmlDeviceGetFieldValues")
    except Exception as exc:  # an old driver without it: pynvml's wrapper says so per read
        _log.debug("nvmlDeviceGetFieldValues not found: %r", exc)
        return None
    request = field_type * 1
    count = ctypes.c_int32(1)

    def read(handle: Any) -> Any:
        values = request()
        values[0].fieldId = _NVML_FI_DEV_POWER_INSTANT
        check(function(handle, count, ctypes.byref(values)))
        return values[0]

    return read


def _match_visible(entry: str, uuids: list[str]) -> int | None:
    if entry.isdigit():
        index = int(entry)
        return index if index < len(uuids) else None
    matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
    return matches[0] if len(matches) == 1 else None


def _map_error(exc: BaseException, where: str) -> BackendError:
    """An NVML exception as one of ecoguard's backend errors."""
    if isinstance(exc, BackendError):
        return exc
    code = getattr(exc, "value", None)
    message = f"NVML {where}: {exc}"
    if code in _UNSUPPORTED_CODES:
        return NotSupportedError(message)
    if code in _LOST_CODES:
        return DeviceLostError(message)
    return BackendError(message)


def _safe_shutdown(pynvml: Any) -> None:
    try:
        pynvml.nvmlShutdown()
    except Exception as exc:  # shutting down a broken driver must not raise
        _log.debug("nvmlShutdown failed: %r", exc)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _optional(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:
        return None


# nvmlValueType_t -> the member of the nvmlValue_t union that holds the value.
_FIELD_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_number(field: Any) -> float:
    kind = int(field.valueType)
    member = _FIELD_VALUE_MEMBERS[kind] if 0 <= kind < len(_FIELD_VALUE_MEMBERS) else "uiVal"
    return float(getattr(field.value, member))
