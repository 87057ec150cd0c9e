"""Progress on stderr: a one-line bar with an ETA on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from ecoguard.bench.runner import CellResult, Progress

BAR_WIDTH = 24


def _duration(seconds: float) -> str:
    whole = max(0, round(seconds))
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    if whole >= 60:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole}s"


class StderrProgress(Progress):
    """Counts generate calls (warm-up and measured); the ETA is the mean time per call so far
    times the calls left. Skipped cells take their calls off the total."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.total = 0
        self.done = 0
        self.timed = 0
        self.started = 0.0
        self.label = ""
        self._drawn = False

    def start(self, total_calls: int) -> None:
        self.total = total_calls
        self.started = self.clock()

    def cell(self, cell: CellResult, index: int, total: int) -> None:
        self.label = f"cell {index}/{total} {cell.precision} bs{cell.batch_size}"
        if not self.tty:
            self._line(f"bench: {self.label} ...")
        else:
            self._draw()

    def call_done(self, cell: CellResult, phase: str) -> None:
        self.done += 1
        self.timed += 1
        if self.tty:
            self._draw(phase)

    def skip_calls(self, n: int) -> None:
        self.total -= max(0, n)

    def cell_done(self, cell: CellResult) -> None:
        if cell.status == "measured" and cell.summary is not None:
            text = (
                f"{cell.precision} bs{cell.batch_size}: "
                f"{cell.summary.energy_j_per_1k.mean:,.1f} J/1k tokens, CV "
                f"{cell.summary.cv_pct or 0:.1f}%"
            )
        else:
            text = f"{cell.precision} bs{cell.batch_size}: {cell.status} ({cell.reason})"
        if self.tty:
            self._clear()
        self._line(f"bench: {text}")
        if self.tty:
            self._draw()

    def eta_s(self) -> float | None:
        if not self.timed:
            return None
        per_call = (self.clock() - self.started) / self.timed
        return per_call * max(0, self.total - self.done)

    def close(self) -> None:
        if self.tty:
            self._clear()

    def _draw(self, phase: str = "") -> None:
        total = max(1, self.total)
        filled = int(BAR_WIDTH * min(self.done, total) / total)
        eta = self.eta_s()
        text = (
            f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.done}/{self.total} calls  "
            f"{self.label} {phase}  ETA {_duration(eta) if eta is not None else '?'}"
        )
        self.stream.write("\r" + text[:120].ljust(120))
        self.stream.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r" + " " * 120 + "\r")
            self.stream.flush()
            self._drawn = False

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
