"""Per-run measurements and their summary statistics (pure, no torch)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class RunSample:
    """One measured generate call. ``tokens`` are new tokens over the whole batch; ``energy_j``
    the meter window's energy (idle power included, as in the reference study); ``duration_s``
    the window's wall time; ``peak_power_w`` the highest sampled power inside the window (None
    when the sampler took no reading there)."""

    energy_j: float
    duration_s: float
    tokens: int
    requests: int
    peak_power_w: float | None = None

    @property
    def throughput_tok_s(self) -> float:
        return self.tokens / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def power_w(self) -> float:
        return self.energy_j / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def energy_j_per_1k(self) -> float:
        return self.energy_j / self.tokens * 1000.0 if self.tokens else 0.0

    @property
    def energy_j_per_request(self) -> float:
        return self.energy_j / self.requests if self.requests else 0.0

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(
            throughput_tok_s=self.throughput_tok_s,
            power_w=self.power_w,
            energy_j_per_1k=self.energy_j_per_1k,
            energy_j_per_request=self.energy_j_per_request,
        )
        return data


@dataclass(frozen=True, slots=True)
class Stat:
    """Mean, sample standard deviation (n - 1) and coefficient of variation (%) of n values."""

    mean: float
    std: float
    cv_pct: float | None
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Stat:
        if not values:
            raise ValueError("no values to summarise")
        mean = statistics.fmean(values)
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        cv = std / mean * 100.0 if mean else None
        return cls(mean=mean, std=std, cv_pct=cv, n=len(values))


@dataclass(frozen=True, slots=True)
class Summary:
    """The statistics of one cell's runs, and whether they drift more than the CV bound."""

    throughput_tok_s: Stat
    power_w: Stat
    energy_j_per_1k: Stat
    energy_j_per_request: Stat
    peak_power_w: float | None
    cv_bound_pct: float
    unstable: bool

    @property
    def cv_pct(self) -> float | None:
        """The CV that decides stability: of J/1k tokens, the figure the rows are about."""
        return self.energy_j_per_1k.cv_pct

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(samples: list[RunSample], cv_bound_pct: float) -> Summary:
    """Statistics over ``samples``; ``unstable`` when the CV of J/1k tokens or of throughput
    exceeds ``cv_bound_pct`` (thermal drift, clock changes or a noisy neighbour)."""
    energy = Stat.of([s.energy_j_per_1k for s in samples])
    throughput = Stat.of([s.throughput_tok_s for s in samples])
    peaks = [s.peak_power_w for s in samples if s.peak_power_w is not None]
    unstable = any(
        stat.cv_pct is not None and stat.cv_pct > cv_bound_pct for stat in (energy, throughput)
    )
    return Summary(
        throughput_tok_s=throughput,
        power_w=Stat.of([s.power_w for s in samples]),
        energy_j_per_1k=energy,
        energy_j_per_request=Stat.of([s.energy_j_per_request for s in samples]),
        peak_power_w=statistics.fmean(peaks) if peaks else None,
        cv_bound_pct=cv_bound_pct,
        unstable=unstable,
    )


def finite(value: float | None) -> float | None:
    """None for NaN/inf so JSON output stays valid."""
    if value is None or not math.isfinite(value):
        return None
    return value
