"""Fakes at the seams for the exporter tests: generation records, GPU states, a meter.

The real records and meter come from ecoguard.energy; these stand-ins have the same public
attributes (the contract in docs/contracts.md, "Meter") so the exporter can be tested
before and independently of the meter.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FakeRecord:
    energy_j: float
    tokens: int
    model_name: str = "tiny-llama"
    precision: str = "fp32"
    gpu_names: tuple[str, ...] = ("NVIDIA A800-SXM4-80GB",)
    gpu_indices: tuple[int, ...] = (0,)
    requests: int = 1
    batch_size: int = 1
    cost_usd: float | None = None
    co2_g: float | None = None
    reference_j_per_token: float | None = None
    reference_tier: str | None = None
    tier: str = "simulated"
    batching_saved_j: float | None = None  # the meter's estimate for a coalesced call


@dataclass(frozen=True)
class FakeFinding:
    rule: str
    mood: str
    title: str = "t"


@dataclass(frozen=True)
class FakeFindingEvent:
    finding: FakeFinding
    action: str = "warn"
    source: str = "generate"


@dataclass
class FakeGpuState:
    index: int
    uuid: str
    name: str
    energy_j_total: float
    power_w: float
    idle_w: float | None = 60.0
    stale: bool = False
    profile: str = "a800"
    tier: str = "simulated"
    method: str = "counter"
    faults: int = 0


@dataclass
class FakeMeter:
    """A meter whose GPU energy grows by ``power_w * dt`` each time ``advance(dt)`` is called."""

    states: list[FakeGpuState] = field(default_factory=list)
    last_sample_monotonic: float | None = None
    samples: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def with_gpus(cls, count: int, *, power_w: float = 250.0) -> FakeMeter:
        return cls(
            states=[
                FakeGpuState(
                    index=i,
                    uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000",
                    name="NVIDIA A800-SXM4-80GB",
                    energy_j_total=0.0,
                    power_w=power_w,
                )
                for i in range(count)
            ]
        )

    def advance(self, dt_s: float, now_monotonic: float) -> None:
        with self.lock:
            for state in self.states:
                state.energy_j_total += state.power_w * dt_s
            self.samples += 1
            self.last_sample_monotonic = now_monotonic

    def gpu_states(self) -> list[FakeGpuState]:
        with self.lock:
            return [FakeGpuState(**vars(s)) for s in self.states]

    def stats(self) -> dict:
        return {
            "samples": self.samples,
            "sample_hz_actual": 10.0,
            "last_sample_monotonic": self.last_sample_monotonic,
            "faults": 0,
        }


def parity_records() -> list[FakeRecord]:
    """Records that feed every family a generate call can feed, for comparing the in-process
    and the multi-worker paths: a plain call, a coalesced one (batching savings), one with no
    cost or CO2 figures, a model folded under "other" (with ``max_models=2``) and figures that
    must be skipped (NaN, infinite, negative)."""
    return [
        FakeRecord(
            energy_j=12.0,
            tokens=40,
            requests=4,
            batch_size=4,
            cost_usd=0.001,
            co2_g=2.0,
            reference_j_per_token=0.3,
            reference_tier="measured",
        ),
        FakeRecord(
            energy_j=10.0,
            tokens=8,
            requests=1,
            batch_size=8,
            cost_usd=0.002,
            co2_g=1.0,
            batching_saved_j=7.5,
        ),
        FakeRecord(energy_j=3.0, tokens=10, model_name="second", precision="nf4"),
        FakeRecord(energy_j=1.0, tokens=2, model_name="third", reference_j_per_token=0.5),
        FakeRecord(
            energy_j=float("nan"),
            tokens=-5,
            cost_usd=float("inf"),
            co2_g=-1.0,
            reference_j_per_token=float("nan"),
            batching_saved_j=float("inf"),
        ),
    ]


def parity_findings() -> list[object]:
    return [
        FakeFindingEvent(FakeFinding("int8-mixed", "orange"), action="fix"),
        FakeFindingEvent(FakeFinding("int8-mixed", "orange"), action="fix"),
        (FakeFinding("batch-size-one", "yellow"), "warn", "generate"),
    ]
