"""Against a real Prometheus: the exporter, the recording and alerting rules, every dashboard panel.

A Prometheus server (Debian's ``prometheus`` package) starts on a free loopback port with a temp
config and storage, scraping ecoguard's /metrics every second and evaluating
grafana/prometheus/*.yml every second. A tiny model generates under the meter (simulated GPU);
then every recording rule and every dashboard query is evaluated through the HTTP API and
compared with the meter's own records. With ``CI`` set a missing binary fails the module.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prom_fakes import FakeRecord
from prom_workload import Workload

pytest.importorskip("prometheus_client")
pytest.importorskip("transformers")

from ecoguard import events
from ecoguard.config import Settings
from ecoguard.export import prometheus as prom
from ecoguard.findings import Finding, Mood

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((REPO / "grafana" / "prometheus").glob("*.yml"))
DASHBOARDS = sorted((REPO / "grafana" / "dashboards").glob("*.json"))
PRICE_USD_PER_KWH = 0.15
GRID_GCO2_PER_KWH = 400.0
PUE = 1.2
# A second model whose records carry a reference, so the reference gauge, its panel and the
# deviation alert are exercised even when the tiny model has no reference row: it uses twice
# its reference.
REF_MODEL = "ref-model"
REF_J_PER_TOKEN = 0.05
SECONDS_PER_MONTH = 2629746
# rate() extrapolates each series back by up to half a scrape interval at the window's start,
# but a counter's extrapolation stops at its zero point, which differs between energy and tokens.
# So the ratio can differ from the records by up to about half an interval over the sampled
# interval: 0.5 / (samples - 1). A loaded machine scrapes fewer times in this short run, hence a
# tolerance from the samples Prometheus actually holds, never below this floor.
J_PER_TOKEN_TOLERANCE = 0.05


def _j_per_token_tolerance(api: PrometheusAPI, model: str) -> float:
    samples = api.scalar(
        f'max(count_over_time(ecoguard_generation_tokens_total{{model_name="{model}"}}[5m]))'
    )
    if not samples or samples < 3:
        return J_PER_TOKEN_TOLERANCE
    return max(J_PER_TOKEN_TOLERANCE, 0.5 / (samples - 1) + 0.01)


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name} binary not found (apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must run the real-Prometheus tests", pytrace=False)
        pytest.skip(message)
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, *, timeout_s: float, what: str, interval_s: float = 0.1):
    """Poll ``predicate`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    stop = threading.Event()
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        stop.wait(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


class PrometheusAPI:
    def __init__(self, base_url: str) -> None:
        self.base = base_url

    def get(self, path: str, **params: str) -> dict:
        url = f"{self.base}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)

    def query(self, expr: str) -> list[dict]:
        body = self.get("/api/v1/query", query=expr)
        assert body["status"] == "success", (expr, body)
        assert body["data"]["resultType"] == "vector", (expr, body)
        return body["data"]["result"]

    def values(self, expr: str) -> dict[tuple, float]:
        """{sorted label items: value} of an instant query."""
        out = {}
        for series in self.query(expr):
            labels = tuple(sorted((k, v) for k, v in series["metric"].items() if k != "__name__"))
            out[labels] = float(series["value"][1])
        return out

    def scalar(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_llama_dir):
    prometheus_bin = _binary("prometheus")
    _binary("promtool")
    tmp = tmp_path_factory.mktemp("prometheus")
    settings = Settings(
        backend="simulated",
        metrics_port=0,
        sample_hz=20.0,
        price_usd_per_kwh=PRICE_USD_PER_KWH,
        grid_gco2_per_kwh=GRID_GCO2_PER_KWH,
        pue=PUE,
        ledger_path=tmp / "ledger.sqlite",
    )
    aggregates = prom.GenerationAggregates()
    server = prom.start_metrics_server(settings, aggregates=aggregates)
    assert server is not None
    workload = Workload(tiny_llama_dir, settings)
    web_port = _free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        json.dumps(  # JSON is valid YAML
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(p) for p in RULE_FILES],
                "scrape_configs": [
                    {
                        "job_name": "ecoguard",
                        "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}],
                    }
                ],
            }
        )
    )
    log = (tmp / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            prometheus_bin,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{web_port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = PrometheusAPI(f"http://127.0.0.1:{web_port}")
    try:
        workload.start()
        wait_for(lambda: _ready(api, process), timeout_s=30, what="Prometheus ready")
        yield _run_workload(api, workload, aggregates, settings) | {
            "api": api,
            "server": server,
            "workload": workload,
        }
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()
        workload.stop()
        prom.stop_metrics_server()
        aggregates.unsubscribe()


def _ready(api: PrometheusAPI, process: subprocess.Popen) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"prometheus exited with {process.returncode}")
    try:
        with urllib.request.urlopen(f"{api.base}/-/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _ref_record(tokens: int) -> FakeRecord:
    energy_j = 2 * REF_J_PER_TOKEN * tokens
    return FakeRecord(
        energy_j=energy_j,
        tokens=tokens,
        model_name=REF_MODEL,
        precision="fp16",
        requests=1,
        batch_size=1,
        cost_usd=energy_j / 3.6e6 * PUE * PRICE_USD_PER_KWH,
        co2_g=energy_j / 3.6e6 * PUE * GRID_GCO2_PER_KWH,
        reference_j_per_token=REF_J_PER_TOKEN,
        reference_tier="measured",
    )


def _trap_event():
    from ecoguard.guard.records import FindingEvent

    finding = Finding(
        rule="int8-mixed",
        mood=Mood.ORANGE,
        title="bitsandbytes INT8 mixed precision",
        message="test trap",
        fix="llm_int8_threshold=0.0",
    )
    return FindingEvent(finding=finding, action="warn", source="load")


def _totals(aggregates: prom.GenerationAggregates) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for (model, _, _), totals in aggregates.snapshot().generation.items():
        energy, tokens = out.get(model, (0.0, 0.0))
        out[model] = (energy + totals.energy_j, tokens + totals.tokens)
    return out


def _scraped_totals(api: PrometheusAPI) -> dict[str, tuple[float, float]]:
    energy = api.values("sum by (model_name) (ecoguard_generation_energy_joules_total)")
    tokens = api.values("sum by (model_name) (ecoguard_generation_tokens_total)")
    return {dict(k)["model_name"]: (v, tokens.get(k, float("nan"))) for k, v in energy.items()}


def _matches(scraped: dict, expected: dict) -> bool:
    return set(scraped) == set(expected) and all(
        math.isclose(scraped[m][0], expected[m][0], rel_tol=1e-9)
        and scraped[m][1] == expected[m][1]
        for m in expected
    )


def _run_workload(api, workload, aggregates, settings) -> dict:
    # Warm-up: one call per model, then wait until Prometheus holds exactly those values as
    # the first sample of each series. rate() starts from that sample, so the rules' figures
    # cover the main phase only, which the test knows record by record.
    workload.generate(batch_size=8)
    events.records.publish(_ref_record(tokens=100))
    events.findings.publish(_trap_event())
    warm = _totals(aggregates)
    wait_for(lambda: _matches(_scraped_totals(api), warm), timeout_s=20, what="warm-up scrape")
    warm_records = workload.captured()
    warm_count = len(warm_records)
    # The guard names the model after its checkpoint (here a temp directory); the direct
    # meter path names it "tiny-llama". Either way it is the name on the meter's first record.
    model = warm_records[0].model_name

    started = time.monotonic()
    batch_sizes = (1, 2, 4, 1, 8, 2, 1, 4)
    calls = 0
    stop = threading.Event()
    # About four seconds of generation: several scrapes and rule evaluations see it move.
    while time.monotonic() - started < 4.0 or calls < len(batch_sizes):
        workload.generate(batch_size=batch_sizes[calls % len(batch_sizes)])
        if calls % 3 == 0:
            events.records.publish(_ref_record(tokens=50 + calls))
        calls += 1
        stop.wait(0.05)
    events.findings.publish(_trap_event())
    final = _totals(aggregates)
    wait_for(lambda: _matches(_scraped_totals(api), final), timeout_s=20, what="final scrape")
    last_scrape = api.scalar("max(timestamp(ecoguard_generation_tokens_total))")
    # The recording rules must have been evaluated after that scrape.
    wait_for(
        lambda: (
            (api.scalar("min(timestamp(ecoguard:energy_per_token_joules:rate5m))") or 0)
            > last_scrape + 0.001
        ),
        timeout_s=20,
        what="rule evaluation after the final scrape",
    )
    main_records = [r for r in workload.captured()[warm_count:] if r.model_name == model]
    main_energy = sum(r.energy_j for r in main_records)
    main_tokens = sum(r.tokens for r in main_records)
    return {
        "calls": calls,
        "model": model,
        "expected_j_per_token": {
            model: main_energy / main_tokens,
            REF_MODEL: 2 * REF_J_PER_TOKEN,
        },
        "records": workload.captured(),
        "settings": settings,
    }


# -- the tests ---------------------------------------------------------------------------------


def _series_by_model(api: PrometheusAPI, expr: str) -> dict[str, float]:
    return {dict(k)["model_name"]: v for k, v in api.values(expr).items()}


def test_every_recording_rule_returns_sane_data(stack):
    api: PrometheusAPI = stack["api"]
    import yaml  # transformers depends on PyYAML

    recorded = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            if group["name"] == "ecoguard.engines":
                continue  # needs engine counters (vLLM, TGI...): tests/engines/test_engine_rules.py
            if group["name"] == "ecoguard.fleet":
                continue  # needs pod labels or DCGM: tests/kubernetes/test_fleet_rules.py
            for rule in group["rules"]:
                if "record" not in rule:
                    continue
                recorded.append(rule["record"])
                direct = api.values(rule["expr"])
                stored = api.values(rule["record"])
                assert direct, f"{rule['record']}: its expression returns no data"
                assert stored, f"{rule['record']}: Prometheus recorded no series"
                for value in (*direct.values(), *stored.values()):
                    assert math.isfinite(value) and value > 0, (rule["record"], value)
    assert len(recorded) >= 8


def test_joules_per_token_matches_the_meters_records(stack):
    api: PrometheusAPI = stack["api"]
    measured = _series_by_model(api, "ecoguard:energy_per_token_joules:rate5m")
    for model, expected in stack["expected_j_per_token"].items():
        assert expected > 0
        tolerance = _j_per_token_tolerance(api, model)
        assert measured[model] == pytest.approx(expected, rel=tolerance), (model, tolerance)
    # Every real record says it is simulated: no live figure is invented on a CPU box.
    assert {r.tier for r in stack["records"] if r.model_name == stack["model"]} == {"simulated"}


def test_cost_and_co2_follow_price_grid_and_pue(stack):
    api: PrometheusAPI = stack["api"]
    watts = _series_by_model(api, "ecoguard:generation_power_watts:rate5m")
    usd_per_hour = _series_by_model(api, "ecoguard:cost_usd_per_hour:rate5m")
    co2_per_hour = _series_by_model(api, "ecoguard:co2_grams_per_hour:rate5m")
    usd_per_month = _series_by_model(api, "ecoguard:cost_usd_per_month:rate1h")
    kwh_per_hour = {m: w * 3600 / 3.6e6 for m, w in watts.items()}
    for model in (stack["model"], REF_MODEL):
        assert watts[model] > 0
        assert usd_per_hour[model] == pytest.approx(
            kwh_per_hour[model] * PUE * PRICE_USD_PER_KWH, rel=1e-6
        )
        assert co2_per_hour[model] == pytest.approx(
            kwh_per_hour[model] * PUE * GRID_GCO2_PER_KWH, rel=1e-6
        )
        # Both windows hold every sample of this short run, and rate() averages the increase
        # over the whole window: the 1 h rate is the 5 m rate times 300 / 3600.
        assert usd_per_month[model] == pytest.approx(
            usd_per_hour[model] / 3600 * SECONDS_PER_MONTH * 300 / 3600, rel=0.02
        )


def test_gpu_power_and_sampler_health(stack):
    api: PrometheusAPI = stack["api"]
    power = api.values("ecoguard:gpu_power_watts:rate1m")
    assert power, "no GPU power series"
    for labels, watts in power.items():
        assert 1 < watts < 2000, (labels, watts)
        assert {"gpu", "uuid", "gpu_name"} <= {k for k, _ in labels}
    age = api.scalar("max(time() - ecoguard_sampler_last_sample_timestamp_seconds)")
    assert age is not None and -1 < age < 10
    assert api.scalar("max(ecoguard_gpu_stale)") == 0
    # Labels join with DCGM-exporter (gpu, uuid) and vLLM (model_name).
    assert api.query(f'ecoguard_generation_tokens_total{{model_name="{stack["model"]}"}}')


def _panel_targets():
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for panel in dashboard["panels"]:
            for inner in [panel, *panel.get("panels", [])]:
                for target in inner.get("targets", []):
                    yield path.name, inner["title"], target["expr"]


def _substitute(expr: str) -> str:
    """What Grafana does before sending a query: template variables and built-in intervals."""
    replacements = {
        "$__rate_interval": "5m",
        "$__interval": "15s",
        "$__range": "5m",
        "$model_name": ".*",
        "$gpu_name": ".*",
    }
    for name, value in replacements.items():
        expr = expr.replace(name, value)
    assert "$" not in re.sub(r"\{\{.*?\}\}", "", expr), f"unsubstituted variable in {expr}"
    return expr


def test_every_dashboard_panel_has_data(stack):
    api: PrometheusAPI = stack["api"]
    panels: dict[tuple[str, str], list[dict]] = {}
    for dashboard, title, expr in _panel_targets():
        if "engine:" in expr or "engine_model:" in expr:
            continue  # engine panels need engine counters: tests/engines/test_engine_rules.py
        if "fleet_" in expr:
            continue  # fleet panels need pod labels: tests/kubernetes/test_fleet_dashboard.py
        values = api.values(_substitute(expr))
        panels.setdefault((dashboard, title), []).append(values)
        for value in values.values():
            assert math.isfinite(value), (title, expr, value)
            assert value >= -1, (title, expr, value)  # only "time since" may be a hair below 0
        # Every query has data: the workload feeds every metric, references included.
        assert values, f"panel {title!r} of {dashboard}: no data for {expr}"
    assert len(panels) >= 12
    # The live J/token of the panel is the rule's figure.
    title = "Joules per token: live vs reference"
    key = next(k for k in panels if k[1] == title)
    live, reference = panels[key]
    live_by_model = {dict(k)["model_name"]: v for k, v in live.items()}
    for model, expected in stack["expected_j_per_token"].items():
        tolerance = _j_per_token_tolerance(api, model)
        assert live_by_model[model] == pytest.approx(expected, rel=tolerance), (model, tolerance)
    ref_by_model = {dict(k)["model_name"]: (v, dict(k)["tier"]) for k, v in reference.items()}
    assert ref_by_model[REF_MODEL] == (pytest.approx(REF_J_PER_TOKEN), "measured")


def test_alerts_fire_for_a_trap_and_a_deviation(stack):
    api: PrometheusAPI = stack["api"]

    def alerts():
        body = api.get("/api/v1/alerts")
        return {(a["labels"]["alertname"], a["state"]) for a in body["data"]["alerts"]}

    wanted = {
        ("EcoguardEnergyTrapFound", "firing"),
        # `for: 15m`: pending is as far as a short test can take it.
        ("EcoguardEnergyPerTokenAboveReference", "pending"),
    }
    wait_for(lambda: wanted <= alerts(), timeout_s=15, what=f"alerts {wanted}")
    names = {name for name, _ in alerts()}
    # A healthy sampler and a moving counter raise nothing.
    assert not names & {"EcoguardSamplerStale", "EcoguardGpuStale", "EcoguardGpuEnergyCounterStuck"}
    rules = api.get("/api/v1/rules")["data"]["groups"]
    health = {r["name"]: r["health"] for g in rules for r in g["rules"]}
    assert health and set(health.values()) == {"ok"}, health


def test_promtool_check_metrics_on_a_scrape(stack):
    body = urllib.request.urlopen(stack["server"].url, timeout=5).read()
    assert b"ecoguard_gpu_energy_joules_total" in body
    result = subprocess.run(
        [_binary("promtool"), "check", "metrics"], input=body, capture_output=True, timeout=30
    )
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), (
        result.stdout + result.stderr
    ).decode()


def test_promtool_check_rules_without_warnings():
    promtool = _binary("promtool")
    result = subprocess.run(
        [promtool, "check", "rules", *map(str, RULE_FILES)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output.upper() and "SUCCESS" in output, output


def test_ledger_and_report_agree_with_prometheus(stack):
    """What Prometheus scraped, the SQLite ledger holds and `ecoguard report` shows are the same
    numbers for the guarded model: three back doors, one set of records."""
    from ecoguard.export.ledger import get_ledger, read_rows
    from ecoguard.export.report import build_report

    api: PrometheusAPI = stack["api"]
    model = stack["model"]
    ledger = get_ledger()
    assert ledger is not None and ledger.flush(10.0)
    path = stack["settings"].ledger_path
    rows = [r for r in read_rows(path) if r["model_name"] == model]
    ours = [r for r in stack["records"] if r.model_name == model]
    assert len(rows) == len(ours) > 0
    scraped = _scraped_totals(api)[model]
    ledger_energy = sum(r["energy_j"] for r in rows)
    ledger_tokens = sum(r["tokens"] for r in rows)
    assert ledger_energy == pytest.approx(scraped[0], rel=1e-9)
    assert ledger_tokens == scraped[1]
    group = next(g for g in build_report(path, by="model")["groups"] if g["key"] == model)
    assert group["energy_j"] == pytest.approx(ledger_energy, rel=1e-9)
    assert group["tokens"] == ledger_tokens
    assert group["joules_per_token"] == pytest.approx(ledger_energy / ledger_tokens)
