"""Settings: one frozen record of how ecoguard behaves, built from arguments or ECOGUARD_* env.

Environment variables (all optional):

- ``ECOGUARD_MODE``: ``warn`` (default), ``fix`` or ``strict``.
- ``ECOGUARD_RULES``: per-rule overrides, ``int8-mixed:fix,batch-size-one:off``; actions are
  ``warn``, ``fix``, ``strict`` and ``off``.
- ``ECOGUARD_BACKEND``: ``auto`` (default), ``nvml``, ``simulated`` or ``null``.
- ``ECOGUARD_SIMULATED_GPU``: GPU profile for the simulated backend (default ``a800``).
- ``ECOGUARD_SAMPLE_HZ``: sampler rate in Hz (default 10).
- ``ECOGUARD_MEASURE``: ``1``/``0``, measure energy of generate calls (default 1).
- ``ECOGUARD_LEDGER``: SQLite ledger path; ``off`` (or set but empty) disables it. Default in
  the user data dir.
- ``ECOGUARD_METRICS_PORT`` / ``ECOGUARD_METRICS_ADDR``: serve /metrics (default off; addr
  127.0.0.1; every interface only when written ``0.0.0.0`` or ``::``, never a shorthand such as
  ``0``). ``ECOGUARD_METRICS_MAX_CONNECTIONS``: connections served at once (default 64, 1-4096).
- ``ECOGUARD_REGION``: electricity price and grid intensity region (default ``us``).
- ``ECOGUARD_PRICE_USD_PER_KWH`` (above 0, at most 10), ``ECOGUARD_GRID_GCO2_PER_KWH`` (above 0,
  at most 2000), ``ECOGUARD_PUE`` (1 to 5): overrides of the region's figures.
- ``ECOGUARD_MONTHLY_REQUESTS``: volume used to express alert impact in $/month (default 1e6; a
  whole number from 0 to 1e12).

Numbers must be finite (``nan`` and ``inf`` are refused). A bad value is a UsageError naming the
variable (the CLI exits 2); at ``import ecoguard.auto`` it is a RuntimeWarning and the default.
- ``ECOGUARD_LOG_FORMAT``: ``lobster`` (default), ``plain`` or ``json``.
- ``ECOGUARD_BATCHING``, ``ECOGUARD_MAX_BATCH_SIZE``, ``ECOGUARD_MAX_WAIT_MS``: opt-in
  coalescing of concurrent generate calls.
"""

from __future__ import annotations

import math
import os
import socket
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ecoguard.errors import UsageError
from ecoguard.regions import region_key

MODES: tuple[str, ...] = ("warn", "fix", "strict")
ACTIONS: tuple[str, ...] = ("warn", "fix", "strict", "off")
BACKENDS: tuple[str, ...] = ("auto", "nvml", "simulated", "null")
LOG_FORMATS: tuple[str, ...] = ("lobster", "plain", "json")
# Accepted ranges of the money and carbon overrides: a price or an intensity of 0, a negative
# one, NaN or infinity is a typo, not a setting (PUE -3 once gave -112 USD, stored in the
# ledger). PUE is total facility power over IT power, so never below 1.
PRICE_RANGE_USD_PER_KWH = (0.0, 10.0)  # exclusive low, inclusive high
GRID_RANGE_GCO2_PER_KWH = (0.0, 2000.0)
PUE_RANGE = (1.0, 5.0)  # inclusive
MAX_MONTHLY_REQUESTS = 10**12
# /metrics connections served at once (one thread and one descriptor each; more wait in the
# listen backlog): the default, and the range accepted.
DEFAULT_METRICS_MAX_CONNECTIONS = 64
METRICS_MAX_CONNECTIONS_RANGE = (1, 4096)  # inclusive


def default_ledger_path() -> Path:
    """``$XDG_DATA_HOME/ecoguard/ledger.sqlite`` (``~/.local/share`` when unset)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(base) / "ecoguard" / "ledger.sqlite"


@dataclass(frozen=True, slots=True)
class Settings:
    mode: str = "warn"
    rules: Mapping[str, str] = field(default_factory=dict)  # rule id -> action
    backend: str = "auto"
    simulated_gpu: str = "a800"
    sample_hz: float = 10.0
    measure: bool = True
    ledger_path: Path | None = field(default_factory=default_ledger_path)
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    metrics_max_connections: int = DEFAULT_METRICS_MAX_CONNECTIONS
    region: str = "us"
    price_usd_per_kwh: float | None = None  # None: from the region table
    grid_gco2_per_kwh: float | None = None  # None: from the region table
    pue: float | None = None  # None: from the region table / deployment kind
    monthly_requests: int = 1_000_000
    log_format: str = "lobster"
    batching: bool = False
    max_batch_size: int = 16
    max_wait_ms: float = 10.0

    def action_for(self, rule_id: str) -> str:
        """The action for one rule: its override if any, else the global mode."""
        return self.rules.get(rule_id, self.mode)

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes).validate()

    def validate(self) -> Settings:
        if self.mode not in MODES:
            raise UsageError(f"unknown mode {self.mode!r}; accepted: {', '.join(MODES)}")
        for rule, action in self.rules.items():
            if action not in ACTIONS:
                raise UsageError(
                    f"unknown action {action!r} for rule {rule!r}; accepted: {', '.join(ACTIONS)}"
                )
        if self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r}; accepted: {', '.join(BACKENDS)}")
        if not 0.1 <= self.sample_hz <= 1000:
            raise UsageError(f"sample rate must be 0.1 to 1000 Hz, got {self.sample_hz!r}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise UsageError(f"metrics port must be 0 to 65535, got {self.metrics_port!r}")
        if self.log_format not in LOG_FORMATS:
            raise UsageError(
                f"unknown log format {self.log_format!r}; accepted: {', '.join(LOG_FORMATS)}"
            )
        if not 1 <= self.max_batch_size <= 1024:
            raise UsageError(f"max batch size must be 1 to 1024, got {self.max_batch_size!r}")
        if not 0 <= self.max_wait_ms <= 60_000:
            raise UsageError(f"max wait must be 0 to 60000 ms, got {self.max_wait_ms!r}")
        if (
            isinstance(self.monthly_requests, bool)
            or not isinstance(self.monthly_requests, int)
            or not 0 <= self.monthly_requests <= MAX_MONTHLY_REQUESTS
        ):
            raise UsageError(
                f"monthly requests (ECOGUARD_MONTHLY_REQUESTS) must be a whole number from 0 to {MAX_MONTHLY_REQUESTS:.0e}, "
                f"got {self.monthly_requests!r}"
            )
        _check_range(
            "electricity price", self.price_usd_per_kwh, PRICE_RANGE_USD_PER_KWH, "USD/kWh"
        )
        _check_range(
            "grid intensity (ECOGUARD_GRID_GCO2_PER_KWH)",
            self.grid_gco2_per_kwh,
            GRID_RANGE_GCO2_PER_KWH,
            "gCO2/kWh",
        )
        if self.pue is not None and not (
            _finite(self.pue) and PUE_RANGE[0] <= self.pue <= PUE_RANGE[1]
        ):
            raise UsageError(
                f"PUE (ECOGUARD_PUE) must be a number from {PUE_RANGE[0]:g} to {PUE_RANGE[1]:g} (facility power "
                f"over IT power; 1.1-1.6 is typical), got {self.pue!r}"
            )
        if not isinstance(self.metrics_addr, str) or not _plain_text(self.metrics_addr):
            raise UsageError(
                f"metrics address (ECOGUARD_METRICS_ADDR) must be a host name or IP address such as 127.0.0.1, "
                f"got {self.metrics_addr!r}"
            )
        _check_listen_address(self.metrics_addr)
        low, high = METRICS_MAX_CONNECTIONS_RANGE
        if (
            isinstance(self.metrics_max_connections, bool)
            or not isinstance(self.metrics_max_connections, int)
            or not low <= self.metrics_max_connections <= high
        ):
            raise UsageError(
                f"metrics max connections (ECOGUARD_METRICS_MAX_CONNECTIONS) must be a whole "
                f"number from {low} to {high}, got {self.metrics_max_connections!r}"
            )
        for name in ("region", "simulated_gpu"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _plain_text(value):
                raise UsageError(f"{name.replace('_', ' ')} must be a plain name, got {value!r}")
        return self

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        on_bad_value: str = "raise",
        **overrides: object,
    ) -> Settings:
        """Settings from ECOGUARD_* variables, then explicit ``overrides`` on top.

        A bad variable raises UsageError naming it and what it accepts. With
        ``on_bad_value="warn"`` (``import ecoguard.auto``: an environment typo must never
        break the application's import) each bad variable is instead warned about once and
        its documented default used."""
        if on_bad_value not in ("raise", "warn"):
            raise ValueError(f"on_bad_value must be 'raise' or 'warn', got {on_bad_value!r}")
        if on_bad_value == "warn":
            return _lenient_from_env(cls, environ, overrides)
        env = os.environ if environ is None else environ
        try:
            return cls._read_env(env, overrides)
        except UsageError as exc:
            # Name the variable at fault (a message such as "sample rate must be 0.1 to 1000
            # Hz" does not say where the value came from); a bad override keeps its message.
            for name, value in _present(env):
                try:
                    cls._read_env({name: value}, {})
                except UsageError as own:
                    shown = value if len(value) <= 40 else value[:40] + "..."
                    raise UsageError(f"{name}={shown!r}: {own}") from None
            raise exc from None

    @classmethod
    def _read_env(cls, env: Mapping[str, str], overrides: Mapping[str, object]) -> Settings:
        values: dict[str, object] = {}

        def get(name: str) -> str | None:
            raw = env.get("ECOGUARD_" + name)
            return raw.strip() if raw is not None and raw.strip() != "" else None

        if (v := get("MODE")) is not None:
            values["mode"] = v.lower()
        if (v := get("RULES")) is not None:
            values["rules"] = parse_rule_overrides(v)
        if (v := get("BACKEND")) is not None:
            values["backend"] = v.lower()
        if (v := get("SIMULATED_GPU")) is not None:
            values["simulated_gpu"] = v
        if (v := get("SAMPLE_HZ")) is not None:
            values["sample_hz"] = _number("ECOGUARD_SAMPLE_HZ", v, float)
        if (v := get("MEASURE")) is not None:
            values["measure"] = _flag("ECOGUARD_MEASURE", v)
        if (v := get("LEDGER")) is not None:
            values["ledger_path"] = None if v.lower() in ("off", "none", "0") else Path(v)
        elif "ECOGUARD_LEDGER" in env:
            # Set but empty (``ECOGUARD_LEDGER= app``): no path given is no ledger, as the
            # ``ledger_path=""`` argument reads; never the default file the user did not name.
            values["ledger_path"] = None
        if (v := get("METRICS_PORT")) is not None:
            values["metrics_port"] = _number("ECOGUARD_METRICS_PORT", v, int)
        if (v := get("METRICS_ADDR")) is not None:
            values["metrics_addr"] = v
        if (v := get("METRICS_MAX_CONNECTIONS")) is not None:
            values["metrics_max_connections"] = _number("ECOGUARD_METRICS_MAX_CONNECTIONS", v, int)
        if (v := get("REGION")) is not None:
            values["region"] = v.lower()
            region_key(v.lower())  # an unknown region names the accepted ones
        if (v := get("PRICE_USD_PER_KWH")) is not None:
            values["price_usd_per_kwh"] = _number("ECOGUARD_PRICE_USD_PER_KWH", v, float)
        if (v := get("GRID_GCO2_PER_KWH")) is not None:
            values["grid_gco2_per_kwh"] = _number("ECOGUARD_GRID_GCO2_PER_KWH", v, float)
        if (v := get("PUE")) is not None:
            values["pue"] = _number("ECOGUARD_PUE", v, float)
        if (v := get("MONTHLY_REQUESTS")) is not None:
            values["monthly_requests"] = _count("ECOGUARD_MONTHLY_REQUESTS", v)
        if (v := get("LOG_FORMAT")) is not None:
            values["log_format"] = v.lower()
        if (v := get("BATCHING")) is not None:
            values["batching"] = _flag("ECOGUARD_BATCHING", v)
        if (v := get("MAX_BATCH_SIZE")) is not None:
            values["max_batch_size"] = _number("ECOGUARD_MAX_BATCH_SIZE", v, int)
        if (v := get("MAX_WAIT_MS")) is not None:
            values["max_wait_ms"] = _number("ECOGUARD_MAX_WAIT_MS", v, float)
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "rules" in values and isinstance(values["rules"], str):
            values["rules"] = parse_rule_overrides(values["rules"])  # type: ignore[arg-type]
        if "ledger_path" in values and isinstance(values["ledger_path"], str):
            text = values["ledger_path"].strip()  # type: ignore[union-attr]
            # the same words as ECOGUARD_LEDGER: never a file named "off" in the working dir
            values["ledger_path"] = None if text.lower() in ("off", "none", "0", "") else Path(text)
        return cls(**values).validate()  # type: ignore[arg-type]


def parse_rule_overrides(text: str) -> dict[str, str]:
    """``"int8-mixed:fix, batch-size-one:off"`` -> ``{"int8-mixed": "fix", ...}``."""
    result: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        rule, sep, action = part.partition(":")
        rule, action = rule.strip(), action.strip().lower()
        if not sep or not rule or action not in ACTIONS:
            raise UsageError(
                f"bad rule override {part!r}; expected RULE:ACTION with ACTION one of "
                f"{', '.join(ACTIONS)}, e.g. int8-mixed:fix,batch-size-one:off"
            )
        result[rule] = action
    return result


def _number(name: str, raw: str, kind: type) -> float | int:
    try:
        value = kind(raw)
    except ValueError:
        raise UsageError(f"{name} must be a number, got {raw!r}") from None
    if not _finite(value):
        raise UsageError(f"{name} must be a finite number, got {raw!r}")
    return value


def _count(name: str, raw: str) -> int:
    """A whole number written as ``1000000``, ``1e6`` or ``1_000_000``."""
    value = _number(name, raw, float)
    if not float(value).is_integer() or not 0 <= value <= MAX_MONTHLY_REQUESTS:
        raise UsageError(
            f"{name} must be a whole number from 0 to {MAX_MONTHLY_REQUESTS:.0e} (e.g. 1e6), "
            f"got {raw!r}"
        )
    return int(value)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_range(what: str, value: float | None, bounds: tuple[float, float], unit: str) -> None:
    low, high = bounds
    if value is not None and not (_finite(value) and low < value <= high):
        raise UsageError(
            f"{what} must be a number above {low:g} and at most {high:g} {unit}, got {value!r}"
        )


def _check_listen_address(addr: str) -> None:
    """UsageError for a shorthand IPv4 form (``0``, ``127.1``, ``0x7f.1``, ``010.0.0.1``): the
    system reads ``0`` as 0.0.0.0, every interface, which nobody writing ``0`` meant to say
    quietly. Every interface must be asked for in full (0.0.0.0 or ::)."""
    try:
        canonical = socket.inet_ntoa(socket.inet_aton(addr))
    except (OSError, ValueError):
        return  # a host name, an IPv6 address or nonsense: the bind says which
    if canonical != addr:
        raise UsageError(
            f"metrics address (ECOGUARD_METRICS_ADDR, --addr) {addr!r} is a shorthand IPv4 form "
            "that the system reads as another address (0 means 0.0.0.0, every interface); write "
            "it in full: 127.0.0.1 or ::1 for this machine only, 0.0.0.0 or :: for every "
            "interface (only behind a firewall), or a host name"
        )


def _plain_text(text: str) -> bool:
    """Non-empty, printable (no control, bidi or format characters) and valid Unicode."""
    return bool(text.strip()) and text.isprintable()


def _present(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ECOGUARD_* variables Settings reads that are set (non-blank) in ``env``."""
    found = []
    for suffix in _ENV_FIELDS:
        raw = env.get("ECOGUARD_" + suffix)
        if raw is not None and raw.strip():
            found.append(("ECOGUARD_" + suffix, raw))
    return found


# Which field each variable sets (for the lenient reading of ecoguard.auto).
_ENV_FIELDS: dict[str, str] = {
    "MODE": "mode",
    "RULES": "rules",
    "BACKEND": "backend",
    "SIMULATED_GPU": "simulated_gpu",
    "SAMPLE_HZ": "sample_hz",
    "MEASURE": "measure",
    "LEDGER": "ledger_path",
    "METRICS_PORT": "metrics_port",
    "METRICS_ADDR": "metrics_addr",
    "METRICS_MAX_CONNECTIONS": "metrics_max_connections",
    "REGION": "region",
    "PRICE_USD_PER_KWH": "price_usd_per_kwh",
    "GRID_GCO2_PER_KWH": "grid_gco2_per_kwh",
    "PUE": "pue",
    "MONTHLY_REQUESTS": "monthly_requests",
    "LOG_FORMAT": "log_format",
    "BATCHING": "batching",
    "MAX_BATCH_SIZE": "max_batch_size",
    "MAX_WAIT_MS": "max_wait_ms",
}


def _lenient_from_env(
    cls: type[Settings], environ: Mapping[str, str] | None, overrides: dict[str, object]
) -> Settings:
    """Each ECOGUARD_* variable read on its own; a bad one is warned about and left at its
    default, so the others still apply. Explicit ``overrides`` are the caller's code: a bad
    one still raises."""
    env = os.environ if environ is None else environ
    kept = {key: value for key, value in env.items() if not key.startswith("ECOGUARD_")}
    for suffix, field_name in _ENV_FIELDS.items():
        name = "ECOGUARD_" + suffix
        if name not in env:
            continue
        try:
            cls._read_env({name: env[name]}, {})
        except UsageError as exc:
            default = getattr(cls(), field_name)
            warnings.warn(
                f"ecoguard: ignoring {name}: {exc}; using the default ({default!r})",
                RuntimeWarning,
                stacklevel=4,
            )
            continue
        kept[name] = env[name]
    return cls.from_env(kept, **overrides)


def _flag(name: str, raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{name} must be 1/0, true/false, yes/no or on/off, got {raw!r}")
