"""A reader that closes the pipe early (`ecoguard data --rows | head -1`) is not an error."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "argv",
    [
        ["data", "--rows"],  # many lines: the pipe breaks while writing
        ["data", "--gpus"],  # a few lines: the pipe breaks at the final flush
        ["audit", "tests/engines/launch"],  # findings (exit 1) unless the pipe breaks
    ],
)
def test_a_pipe_closed_by_the_reader_ends_quietly_with_exit_0(argv):
    proc = subprocess.Popen(
        [sys.executable, "-m", "ecoguard", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # Closed before the command has imported anything, so every write it makes meets a closed
    # pipe: what `head` does after its first line, made deterministic.
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, stderr
    assert stderr == ""


def test_the_output_is_unchanged_when_the_reader_reads_it_all():
    done = subprocess.run(
        [sys.executable, "-m", "ecoguard", "data", "--gpus"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == ""
    assert len(done.stdout.splitlines()) > 3
