"""Settings: one frozen record of how ecoguard behaves, built from arguments or ECOGUARD_* env.

Environment variables (all optional):

- ``ECOGUARD_MODE``: ``warn`` (default), ``fix`` or ``strict``.
- ``ECOGUARD_RULES``: per-rule overrides, ``int8-mixed:fix,batch-size-one:off``; actions are
  ``warn``, ``fix``, ``strict`` and ``off``.
- ``ECOGUARD_BACKEND``: ``auto`` (default), ``nvml``, ``simulated`` or ``null``.
- ``ECOGUARD_SIMULATED_GPU``: GPU profile for the simulated backend (default ``a800``).
- ``ECOGUARD_SAMPLE_HZ``: sampler rate in Hz (default 10).
- ``ECOGUARD_MEASURE``: ``1``/``0``, measure energy of generate calls (default 1).
- ``ECOGUARD_LEDGER``: SQLite ledger path; ``off`` disables it. Default in the user data dir.
- ``ECOGUARD_METRICS_PORT`` / ``ECOGUARD_METRICS_ADDR``: serve /metrics (default off; addr
  127.0.0.1).
- ``ECOGUARD_REGION``: electricity price and grid intensity region (default ``us``).
- ``ECOGUARD_PRICE_USD_PER_KWH``, ``ECOGUARD_GRID_GCO2_PER_KWH``, ``ECOGUARD_PUE``: overrides.
- ``ECOGUARD_MONTHLY_REQUESTS``: volume used to express alert impact in $/month (default 1e6).
- ``ECOGUARD_LOG_FORMAT``: ``lobster`` (default), ``plain`` or ``json``.
- ``ECOGUARD_BATCHING``, ``ECOGUARD_MAX_BATCH_SIZE``, ``ECOGUARD_MAX_WAIT_MS``: opt-in
  coalescing of concurrent generate calls.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ecoguard.errors import UsageError

MODES: tuple[str, ...] = ("warn", "fix", "strict")
ACTIONS: tuple[str, ...] = ("warn", "fix", "strict", "off")
BACKENDS: tuple[str, ...] = ("auto", "nvml", "simulated", "null")
LOG_FORMATS: tuple[str, ...] = ("lobster", "plain", "json")


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
        if self.monthly_requests < 0:
            raise UsageError(f"monthly requests must be >= 0, got {self.monthly_requests!r}")
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Settings from ECOGUARD_* variables, then explicit ``overrides`` on top."""
        env = os.environ if environ is None else environ
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
        if (v := get("METRICS_PORT")) is not None:
            values["metrics_port"] = _number("ECOGUARD_METRICS_PORT", v, int)
        if (v := get("METRICS_ADDR")) is not None:
            values["metrics_addr"] = v
        if (v := get("REGION")) is not None:
            values["region"] = v.lower()
        if (v := get("PRICE_USD_PER_KWH")) is not None:
            values["price_usd_per_kwh"] = _number("ECOGUARD_PRICE_USD_PER_KWH", v, float)
        if (v := get("GRID_GCO2_PER_KWH")) is not None:
            values["grid_gco2_per_kwh"] = _number("ECOGUARD_GRID_GCO2_PER_KWH", v, float)
        if (v := get("PUE")) is not None:
            values["pue"] = _number("ECOGUARD_PUE", v, float)
        if (v := get("MONTHLY_REQUESTS")) is not None:
            values["monthly_requests"] = int(_number("ECOGUARD_MONTHLY_REQUESTS", v, float))
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
        return kind(raw)
    except ValueError:
        raise UsageError(f"{name} must be a number, got {raw!r}") from None


def _flag(name: str, raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{name} must be 1/0, true/false, yes/no or on/off, got {raw!r}")
