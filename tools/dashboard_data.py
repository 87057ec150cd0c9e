"""The data behind the dashboard PNG: a real Prometheus scraping a guarded workload, then every
panel's PromQL asked of it (``tools/render_dashboard.py`` draws the answers).

Starts Debian's ``prometheus`` binary on a free loopback port (temp config and storage, 1 s
scrape and rule evaluation, the recording and alerting rules of ``grafana/prometheus/*.yml``),
turns the guard on with the simulated A800 backend and ``/metrics`` on a free port, drives tiny
models built from a config through phases of load, and runs each panel's queries through
``/api/v1/query_range``. Stops everything it started.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = REPO_ROOT / "grafana" / "dashboards" / "ecoguard-energy.json"
RULE_FILES = sorted((REPO_ROOT / "grafana" / "prometheus").glob("*.yml"))


# --------------------------------------------------------------------------- Prometheus


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrometheusAPI:
    """The few HTTP API calls the renderer needs, against ``base_url``."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def _get(self, path: str, **params: str) -> dict[str, Any]:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus answered {body!r} to {path} {params!r}")
        return body["data"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self._get("/api/v1/query", query=expr)["result"]

    def query_range(
        self, expr: str, start_s: float, end_s: float, step_s: float
    ) -> list[dict[str, Any]]:
        data = self._get(
            "/api/v1/query_range",
            query=expr,
            start=f"{start_s:.3f}",
            end=f"{end_s:.3f}",
            step=f"{step_s:g}",
        )
        return data["result"]


@contextmanager
def running_prometheus(target: str, workdir: Path) -> Iterator[PrometheusAPI]:
    """A Prometheus server scraping ``target`` (host:port) every second, stopped on exit."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("the prometheus binary is not installed (apt-get install prometheus)")
    port = _free_port()
    config = workdir / "prometheus.yml"
    config.write_text(
        json.dumps(  # JSON is valid YAML
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(path) for path in RULE_FILES],
                "scrape_configs": [
                    {"job_name": "ecoguard", "static_configs": [{"targets": [target]}]}
                ],
            }
        )
    )
    log_path = workdir / "prometheus.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        api = PrometheusAPI(f"http://127.0.0.1:{port}")
        try:
            _wait(lambda: _ready_or_dead(api, process, log_path), 30, "Prometheus to be ready")
            yield api
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


def _ready_or_dead(api: PrometheusAPI, process: subprocess.Popen, log_path: Path) -> bool:
    if process.poll() is not None:
        raise RuntimeError(
            f"prometheus exited with {process.returncode}: {log_path.read_text()[-2000:]}"
        )
    return api.ready()


def _wait(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        pause.wait(0.2)
    raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")


# --------------------------------------------------------------------------- workload


@dataclass
class Phase:
    """One stretch of the workload: until ``share`` of the run has passed, call these models.

    ``calls`` is a cycle of (model key, batch size); ``gap_s`` is the pause between calls (the
    GPU idles then, so power follows the duty cycle); ``loads`` happen when the phase starts."""

    name: str
    share: float
    calls: list[tuple[str, int]] = field(default_factory=list)
    gap_s: float = 0.0
    loads: list[tuple[str, str, str]] = field(default_factory=list)  # key, dir, "fp32"/"int8"


def workload_plan() -> list[Phase]:
    """Idle, one-at-a-time serving, batched serving with a second model, 8-bit loads, idle."""
    return [
        Phase("idle", 0.07),
        Phase(
            "batch size 1",
            0.35,
            calls=[("llama", 1)],
            gap_s=0.25,
            loads=[("llama", "tiny-llama", "fp32")],
        ),
        Phase(
            "batched + 2nd model",
            0.62,
            calls=[("llama", 8), ("qwen", 1), ("qwen", 1)],
            gap_s=0.35,
            loads=[("qwen", "tiny-qwen2", "fp32")],
        ),
        Phase(
            "8-bit loads",
            0.93,
            calls=[("llama8", 4), ("qwen", 4), ("qwen8", 4)],
            gap_s=0.2,
            loads=[("llama8", "tiny-llama", "int8"), ("qwen8", "tiny-qwen2", "int8")],
        ),
        Phase("idle", 1.0),
    ]


@dataclass
class RunWindow:
    start_s: float  # wall-clock (epoch) seconds
    end_s: float
    phases: list[tuple[float, str]]  # (epoch seconds, phase name) at each phase's start
    gpu_name: str
    calls: int
    tokens: int
    energy_j: float  # attributed to generate calls, summed over the meter's records


def run_workload(api: PrometheusAPI, duration_s: float, model_root: Path) -> RunWindow:
    """Drive the guarded tiny models through :func:`workload_plan` for ``duration_s`` seconds.

    The guard must already be installed (it names models after their checkpoint folder)."""
    import torch
    import transformers

    from ecoguard import events

    records: list[Any] = []
    unsubscribe = events.records.subscribe(records.append)
    models: dict[str, Any] = {}
    generator = torch.Generator().manual_seed(0)
    phase_marks: list[tuple[float, str]] = []
    calls = 0
    try:
        # The window opens once Prometheus holds a scrape, so no panel starts with a gap.
        _wait(lambda: api.query("up") and api.query("ecoguard_gpu_power_watts"), 30, "scrape")
        start_wall = time.time()
        start = time.monotonic()
        for phase in workload_plan():
            phase_marks.append((time.time(), phase.name))
            print(f"  {time.monotonic() - start:5.1f}s  phase: {phase.name}", flush=True)
            for key, folder, precision in phase.loads:
                quantization = (
                    transformers.BitsAndBytesConfig(load_in_8bit=True)
                    if precision == "int8"
                    else None
                )
                model = transformers.AutoModelForCausalLM.from_pretrained(
                    model_root / folder, quantization_config=quantization
                )
                models[key] = model.eval()
            deadline = start + phase.share * duration_s
            index = 0
            pause = threading.Event()
            while time.monotonic() < deadline:
                if not phase.calls:
                    pause.wait(min(0.5, max(0.0, deadline - time.monotonic())))
                    continue
                key, batch_size = phase.calls[index % len(phase.calls)]
                index += 1
                input_ids = torch.randint(3, 250, (batch_size, 16), generator=generator)
                with torch.inference_mode():
                    models[key].generate(
                        input_ids=input_ids,
                        attention_mask=torch.ones_like(input_ids),
                        max_new_tokens=24,
                        min_new_tokens=12,
                        do_sample=False,
                    )
                calls += 1
                pause.wait(phase.gap_s)
        end_wall = time.time()
        # Two more scrapes and rule evaluations so the last calls are in the TSDB.
        pause = threading.Event()
        pause.wait(2.5)
    finally:
        unsubscribe()
    gpu_name = records[0].gpu_names[0] if records and records[0].gpu_names else "GPU"
    tokens = sum(r.tokens for r in records)
    energy_j = sum(r.energy_j for r in records)
    print(f"  {len(records)} measured calls, {tokens} tokens, {energy_j:.0f} J", flush=True)
    return RunWindow(start_wall, end_wall, phase_marks, gpu_name, calls, tokens, energy_j)


def collect(duration_s: float, rate_interval: str, step_s: float) -> dict[str, Any]:
    """Run the whole stack and return the dashboard's query results (JSON-ready)."""
    import ecoguard
    from ecoguard.config import Settings
    from ecoguard.export.prometheus import get_metrics_server
    from ecoguard.testing.models import build_tiny_model

    # bitsandbytes logs a cast notice on every 8-bit matmul on CPU; it would bury the progress.
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning, module="bitsandbytes")
    try:
        from ecoguard.errors import EnergyTrapWarning

        # The guard also logs each alert; one copy on the console is enough.
        warnings.simplefilter("ignore", EnergyTrapWarning)
    except ImportError:
        pass
    logging.getLogger("transformers").setLevel(logging.ERROR)

    with tempfile.TemporaryDirectory(prefix="ecoguard-dashboard-") as tmp:
        workdir = Path(tmp)
        build_tiny_model(workdir / "tiny-llama", "llama")
        build_tiny_model(workdir / "tiny-qwen2", "qwen2", seed=1)
        # Explicit settings, not ECOGUARD_* env: the picture should not depend on the shell.
        # The ledger is off so the render writes nothing outside its temp folder.
        settings = Settings(
            mode="warn", backend="simulated", simulated_gpu="a800", metrics_port=0,
            sample_hz=10.0, ledger_path=None, region="us",
        )  # fmt: skip
        ecoguard.install(settings=settings, measure=True)
        try:
            server = get_metrics_server()
            if server is None:
                raise RuntimeError("the guard did not start a metrics server")
            print(f"ecoguard /metrics at {server.url}", flush=True)
            with running_prometheus(f"127.0.0.1:{server.port}", workdir) as api:
                print(f"Prometheus at {api.base_url}; workload for {duration_s:.0f} s", flush=True)
                window = run_workload(api, duration_s, workdir)
                return query_dashboard(api, window, rate_interval, step_s)
        finally:
            ecoguard.uninstall()


# --------------------------------------------------------------------------- queries


def substitute(expr: str, rate_interval: str, range_s: float) -> str:
    """Grafana's template substitution for this dashboard: every variable set to "All"."""
    expr = expr.replace("$__rate_interval", rate_interval)
    expr = expr.replace("$__range", f"{max(1, round(range_s))}s")
    # "All" with allValue ".*": a regex matcher accepting every value.
    return re.sub(r"\$\{?(model_name|gpu_name)\}?", ".*", expr)


def query_dashboard(
    api: PrometheusAPI, window: RunWindow, rate_interval: str, step_s: float
) -> dict[str, Any]:
    dashboard = json.loads(DASHBOARD.read_text())
    range_s = window.end_s - window.start_s
    results: dict[str, Any] = {}
    for panel in dashboard["panels"]:
        if panel.get("type") == "row":
            continue
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], rate_interval, range_s)
            series = api.query_range(expr, window.start_s, window.end_s, step_s)
            results[f"{panel['id']}/{target['refId']}"] = {"expr": expr, "series": series}
            print(f"  panel {panel['id']:>2} {target['refId']}: {len(series)} series", flush=True)
    return {
        "start_s": window.start_s,
        "end_s": window.end_s,
        "phases": window.phases,
        "gpu_name": window.gpu_name,
        "calls": window.calls,
        "tokens": window.tokens,
        "energy_j": window.energy_j,
        "rate_interval": rate_interval,
        "step_s": step_s,
        "rendered_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "results": results,
    }
