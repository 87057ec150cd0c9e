"""Each example runs as written (in a fresh interpreter), with a tiny model and a simulated GPU.

examples/ci_audit is checked by tests/audit/test_audit_corpus.py.
"""

from __future__ import annotations

import json
import os
import runpy
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("transformers")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GUNICORN_DIR = EXAMPLES / "gunicorn"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test's environment (ECOGUARD_* already cleared by the root conftest) plus a simulated
    GPU, a private ledger, the tiny model and a private temp dir (checked to be left empty)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(
        ECOGUARD_BACKEND="simulated",
        ECOGUARD_LEDGER=str(tmp_path / "ledger.sqlite"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        EXAMPLE_TINY="1",
        OMP_NUM_THREADS="1",
        TMPDIR=str(tmp_path / "tmp"),
        # torch's compile cache is kept across runs by design (not a leftover): give it its own
        # place so the temp dir check sees only what the examples leave.
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "torch-cache"),
    )
    env.update(extra)
    return env


@pytest.fixture(autouse=True)
def _nothing_left_in_the_temp_dir(tmp_path):
    """Every example cleans up after itself: the temp dir its processes used ends up empty."""
    yield
    temp = tmp_path / "tmp"
    left = sorted(p.name for p in temp.iterdir()) if temp.is_dir() else []
    assert left == [], f"left in the temp dir: {left}"


# Lines that are not the example's own output: third-party start-up notices and progress bars.
NOISE = ("Failed to load", "_pytree", "it/s]", "%|", "DeprecationWarning", "FutureWarning")


def _assert_no_noise(text: str) -> None:
    noisy = [line for line in text.splitlines() if any(mark in line for mark in NOISE)]
    assert noisy == [], noisy


def _run(args: list[str], env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _ledger_rows(path: Path) -> list[dict]:
    conn = sqlite3.connect(path)
    try:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM generations")]
    finally:
        conn.close()


def test_serve_http_self_test(tmp_path):
    env = _env(tmp_path, ECOGUARD_METRICS_PORT="0")
    proc = _run([str(EXAMPLES / "serve_http.py"), "--self-test", "--requests", "9"], env)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["answers"] == 9
    assert result["metrics_url"].startswith("http://127.0.0.1:")
    rows = _ledger_rows(tmp_path / "ledger.sqlite")
    assert len(rows) == 9 and all(r["batch_size"] == 1 for r in rows)
    # /metrics counted exactly the tokens the ledger recorded.
    assert result["tokens_total"] == sum(r["tokens"] for r in rows) > 0
    # Nine one-request calls in a row: the guard's batch-size-one alert went to stderr (as a
    # log line and once as an EnergyTrapWarning), and nothing else did.
    assert "(batch-size-one)" in proc.stderr
    _assert_no_noise(proc.stderr)
    for line in proc.stderr.splitlines():
        alert = line.startswith(("[", "  "))
        assert not line or alert or "EnergyTrapWarning: [batch-size-one]" in line, line
    assert len(proc.stdout.strip().splitlines()) == 1


def test_batch_job_measures_the_whole_job(tmp_path):
    env = _env(tmp_path)
    proc = _run(
        [str(EXAMPLES / "batch_job.py"), "--json", "--batch-size", "3", "--max-new-tokens", "6"],
        env,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["prompts"] == 8 and result["calls"] == 3  # 3 + 3 + 2
    assert result["tier"] == "simulated" and result["gpus"]
    rows = _ledger_rows(tmp_path / "ledger.sqlite")
    assert len(rows) == 3
    assert result["tokens"] == sum(r["tokens"] for r in rows) > 0
    # The block's energy is everything the GPU drew while it ran, so at least the calls' shares.
    assert result["energy_j"] >= sum(r["energy_j"] for r in rows) * (1 - 1e-9)
    assert result["joules_per_token"] == pytest.approx(result["energy_j"] / result["tokens"])


def test_batch_job_reads_a_prompt_file(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("one\n\ntwo\nthree\n", encoding="utf-8")
    proc = _run(
        [str(EXAMPLES / "batch_job.py"), "--prompts", str(prompts), "--max-new-tokens", "4"],
        _env(tmp_path),
    )
    assert "3 prompts in 1 generate call:" in proc.stdout
    assert "[simulated]" in proc.stdout


def test_batch_job_prints_only_its_own_output(tmp_path):
    proc = _run(
        [str(EXAMPLES / "batch_job.py"), "--batch-size", "4", "--max-new-tokens", "5"],
        _env(tmp_path),
    )
    assert proc.stderr == ""  # no third-party notices, warnings or progress bars
    lines = [line for line in proc.stdout.splitlines() if line]
    assert len(lines) == 2, proc.stdout
    # The tiny model's answers are random bytes: it says so instead of printing them.
    assert "random weights" in lines[0] and "not shown" in lines[0]
    assert lines[1].startswith("8 prompts in 2 generate calls: ")
    assert lines[1].endswith("[simulated] on NVIDIA A800-SXM4-80GB")
    assert "\ufffd" not in proc.stdout


def test_gunicorn_config_parses(monkeypatch, tmp_path):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "mp"))
    monkeypatch.setenv("WORKERS", "3")
    config = runpy.run_path(str(GUNICORN_DIR / "gunicorn.conf.py"))
    assert config["workers"] == 3 and config["bind"] == "127.0.0.1:8000"
    assert config["preload_app"] is False
    assert config["multiproc_dir"] == str(tmp_path / "mp")
    for hook in ("on_starting", "post_fork", "child_exit"):
        assert callable(config[hook])
    config["on_starting"](None)
    assert (tmp_path / "mp").is_dir() and not any((tmp_path / "mp").iterdir())


def _exporter_scrape(env: dict[str, str], multiproc_dir: Path) -> dict[str, float]:
    proc = _run(
        [
            "-m",
            "ecoguard",
            "exporter",
            "--once",
            "--backend",
            "simulated",
            "--multiproc-dir",
            str(multiproc_dir),
        ],
        env,
        timeout=60,
    )
    totals: dict[str, float] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


# The worker's life without gunicorn: the post_fork hook, then the app, called as WSGI.
_WORKER_SCRIPT = """
import io, json, runpy, sys
config = runpy.run_path(sys.argv[1])
config["on_starting"](None)
config["post_fork"](None, None)
from ecoguard.export.prometheus import get_metrics_server
assert get_metrics_server() is None, "a worker must not serve /metrics itself"
sys.path.insert(0, sys.argv[2])
import app
answers = []
for i in range(3):
    body = json.dumps({"prompt": f"hello {i}", "max_new_tokens": 5}).encode()
    environ = {"PATH_INFO": "/generate", "REQUEST_METHOD": "POST",
               "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body)}
    status = []
    out = app.application(environ, lambda s, h: status.append(s))
    answers.append((status[0], json.loads(b"".join(out))))
bad = app.application({"PATH_INFO": "/generate", "REQUEST_METHOD": "POST",
                       "CONTENT_LENGTH": "2", "wsgi.input": io.BytesIO(b"{}")},
                      lambda s, h: answers.append((s, None)))
import ecoguard
ecoguard.uninstall()
print(json.dumps([a[0] for a in answers]))
"""


def test_gunicorn_app_as_a_worker_feeds_the_sidecar(tmp_path):
    multiproc = tmp_path / "mp"
    env = _env(tmp_path, PROMETHEUS_MULTIPROC_DIR=str(multiproc), ECOGUARD_METRICS_PORT="9")
    proc = _run(
        ["-c", _WORKER_SCRIPT, str(GUNICORN_DIR / "gunicorn.conf.py"), str(GUNICORN_DIR)], env
    )
    statuses = json.loads(proc.stdout.strip().splitlines()[-1])
    assert statuses == ["200 OK"] * 3 + ["400 Bad Request"]
    totals = _exporter_scrape(env, multiproc)
    assert totals["ecoguard_generation_requests_total"] == 3
    assert totals["ecoguard_generation_tokens_total"] > 0
    # The sidecar sampled the (simulated) GPU itself: device metrics come from it, once.
    assert "ecoguard_gpu_energy_joules_total" in totals


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_gunicorn_two_workers_one_sidecar(tmp_path):
    pytest.importorskip("gunicorn")
    multiproc = tmp_path / "mp"
    port = _free_port()
    env = _env(
        tmp_path, PROMETHEUS_MULTIPROC_DIR=str(multiproc), BIND=f"127.0.0.1:{port}", WORKERS="2"
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            str(GUNICORN_DIR / "gunicorn.conf.py"),
            "--chdir",
            str(GUNICORN_DIR),
            "app:application",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=5):
                    break
            except OSError:
                assert server.poll() is None, server.stderr.read()[-3000:]
                assert time.monotonic() < deadline, "gunicorn did not answer in 120 s"
                time.sleep(0.3)
        pids = set()
        for i in range(8):
            body = json.dumps({"prompt": f"hi {i}", "max_new_tokens": 4}).encode()
            with urllib.request.urlopen(f"{base}/generate", body, timeout=60) as response:
                pids.add(json.loads(response.read())["pid"])
        totals = _exporter_scrape(env, multiproc)
        # Every request counted once, whichever worker served it, in one merged scrape.
        assert totals["ecoguard_generation_requests_total"] == 8
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert pids  # at least one worker answered (which one is gunicorn's choice)
