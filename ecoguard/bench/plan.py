"""What to measure: the validated plan of one bench session (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass

from ecoguard.deployment import PRECISIONS, normalize_precision
from ecoguard.errors import UsageError

# Every canonical precision can be asked for; whether this platform can load it is decided per
# cell at run time (a cell that cannot load is skipped with the reason).
BENCH_PRECISIONS: tuple[str, ...] = PRECISIONS
BACKEND_CHOICES: tuple[str, ...] = ("auto", "nvml", "simulated")
DEFAULT_CV_BOUND_PCT = 5.0


@dataclass(frozen=True, slots=True)
class BenchPlan:
    """One session: every precision x every batch size, each cell ``warmup`` + ``runs`` generate
    calls of ``prompt_tokens`` in and exactly ``generation_tokens`` out per sequence.

    ``cooldown_s`` is slept between measured runs (thermal drift control); ``idle_s`` is how long
    idle power is sampled before the first cell; ``cv_bound_pct`` is the coefficient of variation
    (of J/1k tokens or throughput across runs) above which a cell is flagged for a re-run."""

    model: str
    precisions: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    prompt_tokens: int = 512
    generation_tokens: int = 256
    runs: int = 10
    warmup: int = 3
    cooldown_s: float = 0.0
    idle_s: float = 2.0
    cv_bound_pct: float = DEFAULT_CV_BOUND_PCT
    backend: str = "auto"
    seed: int = 0

    def __post_init__(self) -> None:
        _check_int("prompt-tokens", self.prompt_tokens, 1, 1_048_576)
        _check_int("generation-tokens", self.generation_tokens, 1, 1_048_576)
        _check_int("runs", self.runs, 2, 10_000, why=" (a standard deviation needs two runs)")
        _check_int("warmup", self.warmup, 0, 10_000)
        for size in self.batch_sizes:
            _check_int("batch-sizes", size, 1, 4096)
        if not self.batch_sizes:
            raise UsageError("--batch-sizes is empty; give one or more integers such as 1,8,32")
        if not self.precisions:
            raise UsageError(f"--precisions is empty; accepted: {', '.join(BENCH_PRECISIONS)}")
        for name, value in (("cooldown-s", self.cooldown_s), ("idle-s", self.idle_s)):
            if not 0 <= value <= 3600:
                raise UsageError(f"--{name} must be 0 to 3600 seconds, got {value}")
        if not 0 < self.cv_bound_pct <= 100:
            raise UsageError(
                f"--cv-bound must be above 0 and at most 100 %, got {self.cv_bound_pct}"
            )
        if self.backend not in BACKEND_CHOICES:
            raise UsageError(
                f"unknown backend {self.backend!r}; accepted: {', '.join(BACKEND_CHOICES)}"
            )
        if not self.model or not self.model.strip():
            raise UsageError("--model is empty; give a local model folder or a hub id")

    @property
    def ordered_precisions(self) -> tuple[str, ...]:
        """FP16 first when asked for, so every other cell can carry its delta against the
        same-session baseline at the moment its row is written."""
        if "fp16" in self.precisions:
            return ("fp16", *(p for p in self.precisions if p != "fp16"))
        return self.precisions

    @property
    def cells(self) -> list[tuple[str, int]]:
        return [(p, b) for p in self.ordered_precisions for b in self.batch_sizes]


def _check_int(name: str, value: int, low: int, high: int, why: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UsageError(f"--{name} must be an integer from {low} to {high}{why}, got {value!r}")


def parse_precisions(text: str) -> tuple[str, ...]:
    """``fp16,nf4,int8_pure`` -> canonical names, duplicates dropped, order kept. Aliases that
    :func:`~ecoguard.deployment.normalize_precision` knows are accepted; anything else is a
    UsageError listing the accepted names."""
    out: list[str] = []
    for part in str(text).split(","):
        if not part.strip():
            continue
        try:
            name = normalize_precision(part)
        except UsageError:
            raise UsageError(
                f"unknown precision {part.strip()!r} in --precisions; accepted: "
                f"{', '.join(BENCH_PRECISIONS)}"
            ) from None
        if name not in out:
            out.append(name)
    if not out:
        raise UsageError(f"--precisions is empty; accepted: {', '.join(BENCH_PRECISIONS)}")
    return tuple(out)


def parse_sizes(text: str) -> tuple[int, ...]:
    """``1,8,32`` -> (1, 8, 32); duplicates dropped, order kept. UsageError on anything else."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            size = int(part)
        except ValueError:
            raise UsageError(
                f"--batch-sizes must be integers from 1 to 4096 separated by commas (1,8,32), "
                f"got {part!r}"
            ) from None
        _check_int("batch-sizes", size, 1, 4096)
        if size not in out:
            out.append(size)
    if not out:
        raise UsageError("--batch-sizes is empty; give one or more integers such as 1,8,32")
    return tuple(out)
