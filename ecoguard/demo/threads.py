"""How many CPU threads the demo's torch uses, chosen for the machine it finds.

torch starts one thread per core, and its OpenMP threads spin while they wait: on a machine whose
cores are busy with other work they fight those jobs and each other, and the demo's int8 calls
slowed several-fold (a warm run took 424 s with torch's threads beside another job, 58.5 s with
``OMP_NUM_THREADS=1``). So the demo takes the cores that are free now: the usable cores less the
one-minute load average, at least 1 and at most :data:`MAX_THREADS` (a 135M-parameter model gains
little beyond). ``OMP_NUM_THREADS`` set by the user is kept as it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

MAX_THREADS = 4
ENV = "OMP_NUM_THREADS"


@dataclass(frozen=True, slots=True)
class Threads:
    count: int
    why: str  # how the count was chosen, for the demo's progress line


_ASK = object()  # (read the machine's own figure)


def choose_threads(
    environ: Mapping[str, str] | None = None,
    *,
    cores: int | None = None,
    load: float | object | None = _ASK,
) -> Threads:
    """The thread count for the demo: the user's ``OMP_NUM_THREADS``, else the free cores
    (``load`` None: no load average known, so all usable cores, capped)."""
    environ = os.environ if environ is None else environ
    user = (environ.get(ENV) or "").strip()
    if user.isdigit() and int(user) > 0:
        return Threads(int(user), f"{ENV}={user}, as set")
    cores = cores if cores is not None else _usable_cores()
    if load is _ASK:
        load = _load_average()
    free = round(cores - load) if isinstance(load, int | float) else cores
    count = max(1, min(MAX_THREADS, free))
    busy = f", load {load:.1f}" if isinstance(load, int | float) else ""
    return Threads(count, f"{cores} cores{busy}; {ENV} overrides")


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not available on this platform
        return None


@contextmanager
def demo_threads(threads: Threads) -> Iterator[Threads]:
    """Run the block with torch on ``threads.count`` threads, then put back what was there.

    ``OMP_NUM_THREADS`` is set as well when the user has not set it (OpenMP reads it when torch
    starts, if torch is imported inside the block), and removed again after."""
    set_env = not (os.environ.get(ENV) or "").strip()
    if set_env:
        os.environ[ENV] = str(threads.count)
    import torch  # (the demo is about to import it anyway)

    before = torch.get_num_threads()
    torch.set_num_threads(threads.count)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)
        if set_env:
            os.environ.pop(ENV, None)
