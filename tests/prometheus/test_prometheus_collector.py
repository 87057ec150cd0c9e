"""The collector, the aggregates and the /metrics server, with a fresh registry per test."""

from __future__ import annotations

import http.client
import logging
import socket
import subprocess
import sys
import textwrap
import threading

import pytest
from prom_fakes import FakeFinding, FakeFindingEvent, FakeMeter, FakeRecord

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ecoguard import events
from ecoguard.config import Settings
from ecoguard.export import prometheus as prom
from ecoguard.faults import record_fault, reset_faults

pytestmark = pytest.mark.usefixtures("clean_metrics")

A800 = "NVIDIA A800-SXM4-80GB"
GEN = {"model_name": "tiny-llama", "precision": "fp32", "gpu_name": A800}


def _registry(**kwargs) -> tuple[CollectorRegistry, prom.EcoguardCollector]:
    registry = CollectorRegistry(auto_describe=False)
    collector = prom.EcoguardCollector(**kwargs)
    registry.register(collector)
    return registry, collector


def test_records_become_counters_and_histograms():
    aggregates = prom.GenerationAggregates()
    registry, _ = _registry(aggregates=aggregates, meter=prom.NO_METER)
    aggregates.observe_record(
        FakeRecord(energy_j=12.0, tokens=40, requests=4, batch_size=4, cost_usd=0.001, co2_g=2.0)
    )
    aggregates.observe_record(FakeRecord(energy_j=3.0, tokens=10, requests=1, batch_size=1))
    value = registry.get_sample_value
    assert value("ecoguard_generation_energy_joules_total", GEN) == pytest.approx(15.0)
    assert value("ecoguard_generation_tokens_total", GEN) == 50
    assert value("ecoguard_generation_requests_total", GEN) == 5
    assert value("ecoguard_generation_calls_total", GEN) == 2
    assert value("ecoguard_energy_cost_usd_total", GEN) == pytest.approx(0.001)
    assert value("ecoguard_co2_grams_total", GEN) == pytest.approx(2.0)
    # Batch size: one call at 4, one at 1.
    assert value("ecoguard_generation_batch_size_bucket", {**GEN, "le": "1.0"}) == 1
    assert value("ecoguard_generation_batch_size_bucket", {**GEN, "le": "4.0"}) == 2
    assert value("ecoguard_generation_batch_size_count", GEN) == 2
    assert value("ecoguard_generation_batch_size_sum", GEN) == 5
    # Request energy: four requests at 3 J each, one at 3 J: five observations of 3 J.
    assert value("ecoguard_request_energy_joules_count", GEN) == 5
    assert value("ecoguard_request_energy_joules_sum", GEN) == pytest.approx(15.0)
    assert value("ecoguard_request_energy_joules_bucket", {**GEN, "le": "2.5"}) == 0
    assert value("ecoguard_request_energy_joules_bucket", {**GEN, "le": "5.0"}) == 5
    assert value("ecoguard_request_energy_joules_bucket", {**GEN, "le": "+Inf"}) == 5


def test_reference_gauge_carries_tier_and_latest_value():
    aggregates = prom.GenerationAggregates()
    registry, _ = _registry(aggregates=aggregates, meter=prom.NO_METER)
    aggregates.observe_record(
        FakeRecord(energy_j=1.0, tokens=1, reference_j_per_token=0.5, reference_tier="measured")
    )
    aggregates.observe_record(
        FakeRecord(energy_j=1.0, tokens=1, reference_j_per_token=0.4, reference_tier="derived")
    )
    assert registry.get_sample_value(
        "ecoguard_reference_energy_per_token_joules", {**GEN, "tier": "derived"}
    ) == pytest.approx(0.4)
    assert (
        registry.get_sample_value(
            "ecoguard_reference_energy_per_token_joules", {**GEN, "tier": "measured"}
        )
        is None
    )


def test_findings_counted_by_rule_mood_action_from_the_event_bus():
    aggregates = prom.GenerationAggregates()
    registry, _ = _registry(aggregates=aggregates, meter=prom.NO_METER)
    aggregates.subscribe()
    try:
        event = FakeFindingEvent(FakeFinding("int8-mixed", "orange"), action="fix")
        events.findings.publish(event)
        events.findings.publish(event)
        events.findings.publish((FakeFinding("batch-size-one", "yellow"), "warn", "generate"))
        events.records.publish(FakeRecord(energy_j=2.0, tokens=4))
    finally:
        aggregates.unsubscribe()
    events.records.publish(FakeRecord(energy_j=100.0, tokens=4))  # after unsubscribe: ignored
    value = registry.get_sample_value
    labels = {"rule": "int8-mixed", "mood": "orange", "action": "fix"}
    assert value("ecoguard_findings_total", labels) == 2
    labels = {"rule": "batch-size-one", "mood": "yellow", "action": "warn"}
    assert value("ecoguard_findings_total", labels) == 1
    assert value("ecoguard_generation_energy_joules_total", GEN) == pytest.approx(2.0)


def test_finding_series_exist_at_zero_before_the_first_firing():
    """increase() cannot see a counter series born at 1, so every enabled rule's series starts
    at 0 under the configured action; rules turned off get none."""
    aggregates = prom.GenerationAggregates()
    settings = Settings(mode="fix", rules={"batch-size-one": "off", "int8-mixed": "strict"})
    registry, _ = _registry(aggregates=aggregates, meter=prom.NO_METER, settings=settings)
    value = registry.get_sample_value
    assert (
        value(
            "ecoguard_findings_total", {"rule": "int8-mixed", "mood": "orange", "action": "strict"}
        )
        == 0
    )
    assert (
        value("ecoguard_findings_total", {"rule": "fp8-eager", "mood": "red", "action": "fix"}) == 0
    )
    for mood in ("yellow", "orange", "gray"):
        labels = {"rule": "reference-deviation", "mood": mood, "action": "fix"}
        assert value("ecoguard_findings_total", labels) == 0
    for action in ("warn", "fix", "strict", "off"):
        labels = {"rule": "batch-size-one", "mood": "yellow", "action": action}
        assert value("ecoguard_findings_total", labels) is None
    aggregates.observe_finding(FakeFindingEvent(FakeFinding("int8-mixed", "orange"), "strict"))
    assert (
        value(
            "ecoguard_findings_total", {"rule": "int8-mixed", "mood": "orange", "action": "strict"}
        )
        == 1
    )


def test_every_rule_declares_the_moods_its_check_yields():
    from ecoguard.findings import RULE_IDS
    from ecoguard.rules import RULES

    assert set(RULES) == set(RULE_IDS)
    assert all(spec.moods for spec in RULES.values())


def test_coalesced_calls_count_the_energy_batching_saved():
    """The counter adds each record's own batching saving (the meter's estimate, carried on the
    record); the exporter computes nothing, and a bad figure is skipped."""
    aggregates = prom.GenerationAggregates()
    registry, _ = _registry(aggregates=aggregates, meter=prom.NO_METER)
    aggregates.observe_record(FakeRecord(energy_j=10.0, tokens=8, requests=1, batch_size=8))
    name = "ecoguard_batching_energy_saved_joules_total"
    assert registry.get_sample_value(name, GEN) is None  # no record carried a saving yet
    aggregates.observe_record(FakeRecord(energy_j=10.0, tokens=8, batching_saved_j=6.5))
    aggregates.observe_record(FakeRecord(energy_j=20.0, tokens=16, batching_saved_j=3.25))
    aggregates.observe_record(FakeRecord(energy_j=1.0, tokens=1, batching_saved_j=float("nan")))
    assert registry.get_sample_value(name, GEN) == pytest.approx(9.75)


def test_model_names_beyond_the_cap_fold_into_other():
    aggregates = prom.GenerationAggregates(max_models=2)
    registry, _ = _registry(aggregates=aggregates, meter=prom.NO_METER)
    for name in ("a", "b", "c", "d", "a"):
        aggregates.observe_record(
            FakeRecord(energy_j=1.0, tokens=1, model_name=name, reference_j_per_token=1.0)
        )
    families = {f.name: f for f in registry.collect()}
    models = {s.labels["model_name"] for s in families["ecoguard_generation_tokens"].samples}
    assert models == {"a", "b", "other"}
    assert (
        registry.get_sample_value(
            "ecoguard_generation_tokens_total", {**GEN, "model_name": "other"}
        )
        == 2
    )
    assert registry.get_sample_value("ecoguard_folded_model_names") == 2
    refs = {
        s.labels["model_name"]
        for s in families["ecoguard_reference_energy_per_token_joules"].samples
    }
    assert refs == {"a", "b"}


def test_device_metrics_and_sampler_health_from_the_meter():
    meter = FakeMeter.with_gpus(2, power_w=200.0)
    meter.advance(0.5, now_monotonic=100.0)
    meter.states[1].stale = True
    registry, _ = _registry(meter=meter, clock=lambda: 1_000_000.0, monotonic=lambda: 102.0)
    gpu0 = {"gpu": "0", "uuid": meter.states[0].uuid, "gpu_name": A800}
    gpu1 = {"gpu": "1", "uuid": meter.states[1].uuid, "gpu_name": A800}
    value = registry.get_sample_value
    assert value("ecoguard_gpu_energy_joules_total", gpu0) == pytest.approx(100.0)
    assert value("ecoguard_gpu_power_watts", gpu0) == 200.0
    assert value("ecoguard_gpu_idle_power_watts", gpu0) == 60.0
    assert value("ecoguard_gpu_stale", gpu0) == 0
    assert value("ecoguard_gpu_stale", gpu1) == 1
    assert (
        value(
            "ecoguard_gpu_info",
            {**gpu0, "profile": "a800", "tier": "simulated", "method": "counter"},
        )
        == 1
    )
    # Last sample 2 s before "now" on the monotonic clock: 2 s before the wall clock too.
    assert value("ecoguard_sampler_last_sample_timestamp_seconds") == pytest.approx(999_998.0)
    assert value("ecoguard_sampler_samples_total") == 1


def test_config_info_and_internal_faults():
    reset_faults()
    try:
        record_fault("guard.extract", RuntimeError("boom"))
        settings = Settings(mode="fix", rules={"int8-mixed": "off"}, region="eu")
        registry, _ = _registry(meter=prom.NO_METER, settings=settings)
        value = registry.get_sample_value
        assert value("ecoguard_internal_faults_total", {"stage": "guard.extract"}) == 1
        info = next(f for f in registry.collect() if f.name == "ecoguard_config")
        labels = info.samples[0].labels
        assert labels["mode"] == "fix"
        assert labels["rules"] == "int8-mixed:off"
        assert labels["region"] == "eu"
        assert labels["backend"] == "auto"
    finally:
        reset_faults()


def test_config_info_labels_come_from_one_declaration():
    """CONFIG_INFO's label names and the values written are both CONFIG_LABELS; each value is
    spelled as before the table (optional figures blank, flags lower case, numbers %g)."""
    from ecoguard import __version__
    from ecoguard.export.prometheus.spec import CONFIG_INFO, CONFIG_LABELS, config_values

    assert CONFIG_INFO.labels == tuple(label.name for label in CONFIG_LABELS)
    settings = Settings(
        rules={"int8-mixed": "off", "fp8-eager": "strict"},
        price_usd_per_kwh=0.2,
        pue=1.3,
        batching=True,
        max_wait_ms=2.5,
        sample_hz=7.25,
        ledger_path=None,
    )
    registry, _ = _registry(meter=prom.NO_METER, settings=settings)
    info = next(f for f in registry.collect() if f.name == "ecoguard_config")
    assert info.samples[0].labels == {
        "version": __version__,
        "mode": "warn",
        "rules": "fp8-eager:strict,int8-mixed:off",
        "backend": "auto",
        "simulated_gpu": "a800",
        "sample_hz": "7.25",
        "measure": "true",
        "region": "us",
        "price_usd_per_kwh": "0.2",
        "grid_gco2_per_kwh": "",
        "pue": "1.3",
        "monthly_requests": "1000000",
        "batching": "true",
        "max_batch_size": "16",
        "max_wait_ms": "2.5",
        "ledger": "off",
    }
    assert config_values(settings) == list(info.samples[0].labels.values())


def test_the_null_meter_serves_no_device_families():
    registry, _ = _registry(meter=prom.NO_METER)
    names = {family.name for family in registry.collect()}
    assert not any(name.startswith(("ecoguard_gpu_", "ecoguard_sampler_")) for name in names)
    registry, _ = _registry(meter=FakeMeter.with_gpus(0))  # a meter that sees no GPU: empty
    names = {family.name for family in registry.collect()}
    assert "ecoguard_gpu_energy_joules" in names


def test_a_failing_meter_is_a_counted_fault_and_the_scrape_goes_on():
    class BrokenMeter:
        def gpu_states(self):
            raise RuntimeError("driver gone")

    reset_faults()
    try:
        aggregates = prom.GenerationAggregates()
        aggregates.observe_record(FakeRecord(energy_j=1.0, tokens=2))
        registry, _ = _registry(aggregates=aggregates, meter=BrokenMeter())
        assert registry.get_sample_value("ecoguard_generation_tokens_total", GEN) == 2
        assert registry.get_sample_value("ecoguard_gpu_power_watts", {"gpu": "0"}) is None
        # Each scrape (three so far, counting this one) counts the failure once.
        assert (
            registry.get_sample_value(
                "ecoguard_internal_faults_total", {"stage": "metrics.collect"}
            )
            == 3
        )
    finally:
        reset_faults()


def test_aggregates_are_thread_safe():
    aggregates = prom.GenerationAggregates()
    registry, _ = _registry(aggregates=aggregates, meter=prom.NO_METER)

    def feed():
        for _ in range(500):
            aggregates.observe_record(FakeRecord(energy_j=0.5, tokens=2))

    threads = [threading.Thread(target=feed) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(20):  # scrapes race with the feeders
        registry.get_sample_value("ecoguard_generation_tokens_total", GEN)
    for t in threads:
        t.join()
    assert registry.get_sample_value("ecoguard_generation_tokens_total", GEN) == 4000
    assert registry.get_sample_value("ecoguard_generation_energy_joules_total", GEN) == 1000


# -- the HTTP server ---------------------------------------------------------------------------


def _request(port: int, method: str, path: str) -> tuple[int, bytes, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read(), dict(response.getheaders())
    finally:
        conn.close()


def test_server_answers_get_and_head_on_metrics_only():
    meter = FakeMeter.with_gpus(1)
    meter.advance(1.0, now_monotonic=1.0)
    server = prom.start_metrics_server(
        Settings(metrics_port=0), meter=meter, aggregates=prom.GenerationAggregates()
    )
    assert server is not None and server.port > 0 and server.addr == "127.0.0.1"
    assert server._thread.name.startswith("ecoguard-metrics") and server._thread.daemon
    status, body, headers = _request(server.port, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {
        "ecoguard_gpu_energy_joules",
        "ecoguard_config_info",
        "ecoguard_gpu_power_watts",
    } <= names
    status, body, headers = _request(server.port, "HEAD", "/metrics")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
    assert _request(server.port, "GET", "/metrics?x=1")[0] == 200
    assert _request(server.port, "GET", "/")[0] == 404
    assert _request(server.port, "GET", "/metricsx")[0] == 404
    status, _, headers = _request(server.port, "POST", "/metrics")
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    # Same address again: the running server is reused, with the new settings.
    again = prom.start_metrics_server(Settings(metrics_port=0, mode="strict"))
    assert again is server
    assert b'mode="strict"' in _request(server.port, "GET", "/metrics")[1]
    prom.stop_metrics_server()
    assert not server.running
    with pytest.raises(OSError):
        _request(server.port, "GET", "/metrics")
    prom.stop_metrics_server()  # idempotent


def test_port_in_use_logs_a_clear_error_and_returns_none(caplog):
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    try:
        with caplog.at_level(logging.ERROR, logger="ecoguard.metrics"):
            server = prom.start_metrics_server(
                Settings(metrics_port=port), aggregates=prom.GenerationAggregates()
            )
        assert server is None
        assert prom.get_metrics_server() is None
        message = caplog.text
        assert f"127.0.0.1:{port}" in message and "ECOGUARD_METRICS_PORT" in message
    finally:
        blocker.close()


def test_importing_ecoguard_does_not_import_prometheus_client():
    code = "import sys, ecoguard; assert 'prometheus_client' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- multiprocess mode -------------------------------------------------------------------------

_WORKER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {fakes_dir!r})
    from prom_fakes import FakeFinding, FakeFindingEvent, FakeRecord
    from ecoguard import events
    from ecoguard.export.prometheus import enable_worker_export
    assert enable_worker_export(), "multiprocess export not enabled"
    for _ in range(3):
        events.records.publish(FakeRecord(energy_j=2.0, tokens=10, requests=2, batch_size=2,
                                          reference_j_per_token=0.1, reference_tier="measured"))
    events.findings.publish(FakeFindingEvent(FakeFinding("int8-mixed", "orange")))
    """
)


def test_worker_counters_merge_in_the_sidecar_registry(tmp_path):
    from pathlib import Path

    from ecoguard.export.exporter_cli import build_registry

    multiproc = tmp_path / "multiproc"
    multiproc.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(multiproc), "PATH": "/usr/bin:/bin"}
    code = _WORKER.format(fakes_dir=str(Path(__file__).parent))
    workers = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
    assert all(w.wait(timeout=60) == 0 for w in workers)
    meter = FakeMeter.with_gpus(1)
    meter.advance(2.0, now_monotonic=5.0)
    registry = build_registry(Settings(), meter, str(multiproc))
    value = registry.get_sample_value
    # Two workers x three records: counters add up across processes.
    assert value("ecoguard_generation_tokens_total", GEN) == 60
    assert value("ecoguard_generation_energy_joules_total", GEN) == pytest.approx(12.0)
    assert value("ecoguard_generation_requests_total", GEN) == 12
    assert value("ecoguard_request_energy_joules_count", GEN) == 12
    assert value("ecoguard_generation_batch_size_bucket", {**GEN, "le": "2.0"}) == 6
    assert (
        value("ecoguard_findings_total", {"rule": "int8-mixed", "mood": "orange", "action": "warn"})
        == 2
    )
    # The reference gauge is the most recent value, not a sum over workers.
    assert value(
        "ecoguard_reference_energy_per_token_joules", {**GEN, "tier": "measured"}
    ) == pytest.approx(0.1)
    # The GPU is read once, by the sidecar.
    assert value(
        "ecoguard_gpu_energy_joules_total",
        {"gpu": "0", "uuid": meter.states[0].uuid, "gpu_name": A800},
    ) == pytest.approx(500.0)


def test_render_text_is_byte_equal_to_prometheus_client():
    from prometheus_client import Counter, Histogram
    from prometheus_client.exposition import generate_latest

    aggregates = prom.GenerationAggregates()
    for name in ('odd "name"\\with\nnewline', "plain"):
        aggregates.observe_record(
            FakeRecord(
                energy_j=7.5,
                tokens=3,
                model_name=name,
                requests=2,
                batch_size=3,
                reference_j_per_token=1.0,
                reference_tier="derived",
            )
        )
    aggregates.observe_finding(FakeFindingEvent(FakeFinding("fp8-eager", "red"), "strict"))
    meter = FakeMeter.with_gpus(3)
    meter.advance(1.0, now_monotonic=1.0)
    registry, _ = _registry(
        aggregates=aggregates,
        meter=meter,
        settings=Settings(),
        clock=lambda: 5.0,
        monotonic=lambda: 2.0,
    )
    Counter(
        "plain_requests", "A counter\nwith a newline", ["zeta", "alpha"], registry=registry
    ).labels("z", "a").inc()
    Histogram("plain_latency_seconds", "h", registry=registry).observe(0.3)
    assert prom.render_text(registry) == generate_latest(registry)


def test_stop_closes_kept_alive_connections():
    """Prometheus keeps its scrape connection open; a stopped server must not go on answering
    on it (with a 15 s scrape interval under the 30 s idle timeout it would, forever)."""
    server = prom.start_metrics_server(
        Settings(metrics_port=0), meter=prom.NO_METER, aggregates=prom.GenerationAggregates()
    )
    assert server is not None
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        response.read()
        assert response.status == 200 and not response.will_close
        prom.stop_metrics_server()
        assert not server.running
        with pytest.raises((OSError, http.client.HTTPException)):
            conn.request("GET", "/metrics")
            conn.getresponse().read()
    finally:
        conn.close()


def test_concurrent_starts_share_one_server():
    settings = Settings(metrics_port=0)
    barrier = threading.Barrier(8)
    servers = []
    lock = threading.Lock()

    def start():
        barrier.wait()
        server = prom.start_metrics_server(settings)
        with lock:
            servers.append(server)

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    try:
        assert len(servers) == 8 and len({id(s) for s in servers}) == 1
        assert servers[0].running
    finally:
        prom.stop_metrics_server()
