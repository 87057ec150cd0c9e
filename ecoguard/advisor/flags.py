"""The deployment facts a front door names as flags or tool arguments (model, GPU, precision,
workload shape, region, observed figures...), turned into the advisor's answer in one place.

``ecoguard optimize|compare|estimate|diagnose`` and the MCP deployment tools both build a
``DeploymentArguments`` and ask :meth:`DeploymentArguments.answer` for the protocol's answer,
through :func:`~ecoguard.advisor.answers.answer_for_flags`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ecoguard.advisor.answers import Answer, answer_for_flags
from ecoguard.config import Settings
from ecoguard.knowledge import region as grid_region


@dataclass(frozen=True)
class DeploymentArguments:
    """The facts of one call; None means "not given": the advisor fills a stated default."""

    model: str | None = None
    gpu: str | None = None
    precision: str | None = None
    batch_size: int | None = None
    prompt_tokens: int | None = None
    generation_tokens: int | None = None
    requests_per_month: int | None = None
    region: str | None = None
    use: str | None = None
    language: str = "en"
    price_usd_per_kwh: float | None = None
    cny_per_usd: float | None = None
    observed_throughput_tok_s: float | None = None
    observed_power_w: float | None = None
    observed_energy_j_per_1k: float | None = None

    @classmethod
    def from_call(cls, arguments: Mapping[str, Any]) -> DeploymentArguments:
        """The facts from a tool's validated arguments. A name that is not a field is a
        TypeError: a tool table that gives a deployment tool a foreign argument is a bug."""
        return cls(**arguments)

    @classmethod
    def from_namespace(cls, args: object, **given: Any) -> DeploymentArguments:
        """The facts from parsed command-line flags: every field a flag of the command fills
        (under the field's own name), then ``given`` (flags named otherwise)."""
        names = (f.name for f in dataclasses.fields(cls))
        flags = {name: getattr(args, name) for name in names if hasattr(args, name)}
        return cls(**{**flags, **given})

    def with_use(self, use: str | None) -> DeploymentArguments:
        return dataclasses.replace(self, use=use)

    def settings(self, base: Settings) -> Settings:
        """``base`` with this call's region and electricity price, where given (an unknown
        region is a UsageError naming the known ones)."""
        changes: dict[str, Any] = {}
        if self.region is not None:
            changes["region"] = grid_region(self.region).key
        if self.price_usd_per_kwh is not None:
            changes["price_usd_per_kwh"] = self.price_usd_per_kwh
        return base.with_(**changes) if changes else base

    def observed(self) -> dict[str, float | None] | None:
        """The observed figures (diagnose), or None when none was given."""
        figures = {
            "throughput_tok_s": self.observed_throughput_tok_s,
            "power_w": self.observed_power_w,
            "energy_j_per_1k": self.observed_energy_j_per_1k,
        }
        return figures if any(value is not None for value in figures.values()) else None

    def answer(self, protocol: str, base: Settings) -> Answer:
        """The advisor's answer for ``protocol`` (optimize, compare, estimate, diagnose): its
        result plus the defaults used for missing facts and the published-vs-measured notes."""
        return answer_for_flags(
            protocol,
            model=self.model,
            gpu=self.gpu,
            precision=self.precision,
            batch_size=self.batch_size,
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
            requests_per_month=self.requests_per_month,
            use=self.use,
            language=self.language,
            settings=self.settings(base),
            observed=self.observed(),
            cny_per_usd=self.cny_per_usd,
        )
