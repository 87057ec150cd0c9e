"""What a newcomer meets around the demo: its thread count, a ledger kept apart from theirs, a
closing command that shows what the run wrote, and /metrics after the demo ends."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ecoguard.cli import main
from ecoguard.demo.threads import MAX_THREADS, Threads, choose_threads, demo_threads

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


# ------------------------------------------------------------------ threads


@pytest.mark.parametrize(
    ("environ", "cores", "load", "count"),
    [
        ({"OMP_NUM_THREADS": "3"}, 64, 0.0, 3),  # the user's choice stands
        ({}, 2, 0.1, 2),  # an idle 2-core machine: both cores
        ({}, 2, 7.8, 1),  # cores busy with other jobs: one thread, not a fight
        ({}, 64, 1.0, MAX_THREADS),  # a big machine: a 135M model gains little beyond 4
        ({}, 8, None, MAX_THREADS),  # no load average on this platform: the cores, capped
        ({"OMP_NUM_THREADS": "0"}, 2, 0.0, 2),  # not a usable value: chosen as if unset
    ],
)
def test_the_demo_takes_the_free_cores_unless_told(environ, cores, load, count):
    assert choose_threads(environ, cores=cores, load=load).count == count


def test_demo_threads_sets_torch_and_puts_it_back(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    with demo_threads(Threads(wanted, "test")):
        assert torch.get_num_threads() == wanted
        assert os.environ["OMP_NUM_THREADS"] == str(wanted)  # for torch started in the block
    assert torch.get_num_threads() == before
    assert "OMP_NUM_THREADS" not in os.environ


# ------------------------------------------------------------------ ledger and closing line


def _quick(tmp_path, monkeypatch, **kwargs):
    from ecoguard.demo import run_demo

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = io.StringIO()
    summary = run_demo(
        quick=True, backend="simulated", metrics_port=None, stream=out, **kwargs
    ).to_dict()
    return summary, out.getvalue()


def _suggested_report(text: str) -> list[str]:
    """The `ecoguard report ...` command the demo's last lines suggest, as argv."""
    import shlex

    match = re.search(r"See it again with `ecoguard (report[^`]*)`", text)
    assert match, text[-600:]
    return shlex.split(match.group(1))


def test_the_demo_keeps_its_calls_out_of_the_users_ledger(tmp_path, monkeypatch, capsys):
    users = Path(os.environ["ECOGUARD_LEDGER"])  # the test's stand-in for the user's ledger
    summary, text = _quick(tmp_path, monkeypatch)
    assert not users.exists()
    written = Path(summary["ledger"]["path"])
    assert written.exists() and written.is_relative_to(tmp_path / "cache")
    # The command it suggests shows exactly this run's calls.
    assert main([*_suggested_report(text), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["total"]["calls"] == summary["ledger"]["records"]
    assert report["total"]["tokens"] == summary["ledger"]["total"]["tokens"]


def test_ledger_default_writes_to_the_users_ledger_when_asked(tmp_path, monkeypatch):
    users = Path(os.environ["ECOGUARD_LEDGER"])
    summary, text = _quick(tmp_path, monkeypatch, ledger="default")
    assert summary["ledger"]["path"] == str(users) and users.exists()
    assert _suggested_report(text) == ["report", "--ledger", str(users)]


def test_ledger_off_does_not_send_the_user_to_a_report_of_other_figures(tmp_path, monkeypatch):
    summary, text = _quick(tmp_path, monkeypatch, ledger="off")
    assert summary["ledger"]["path"] is None
    assert "See it again" not in text and "`ecoguard report`" not in text
    assert "--ledger PATH" in text  # how to keep the calls next time


# ------------------------------------------------------------------ /metrics after the report


def test_keep_serving_serves_metrics_after_the_report_until_ctrl_c(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "ecoguard", "demo", "--quick", "--keep-serving"]
    command += ["--backend", "simulated", "--ledger", "off", "--metrics-port", "0"]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        url = None
        deadline = time.monotonic() + 240
        lines = []
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            found = re.search(r"Serving (http://\S+/metrics) until Ctrl-C", line)
            url = found.group(1) if found else None
        assert url, "".join(lines[-30:])
        assert any("Done in" in line for line in lines)  # after the report
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
        tokens = [ln for ln in body.splitlines() if ln.startswith("ecoguard_generation_tokens")]
        assert tokens and float(tokens[0].rsplit(" ", 1)[1]) > 0  # this run's counters
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
