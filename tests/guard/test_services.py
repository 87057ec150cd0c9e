"""The composition root: start_services starts the ledger, meter and metrics server and owns what
it started; the meter alone never starts the ledger (energy sits below export)."""

from __future__ import annotations

import pytest

from ecoguard import events
from ecoguard.config import Settings
from ecoguard.energy import CallInfo, get_meter, start_meter, stop_meter
from ecoguard.export import ledger as ledger_mod
from ecoguard.export.ledger import get_ledger, read_rows
from ecoguard.faults import fault_counts, reset_faults
from ecoguard.guard.install import install, uninstall
from ecoguard.services import Services, measure, start_services


@pytest.fixture(autouse=True)
def _clean():
    uninstall()
    stop_meter()
    ledger_mod.stop_ledger()
    reset_faults()
    yield
    uninstall()
    stop_meter()
    ledger_mod.stop_ledger()
    reset_faults()


def _one_record(meter, label: str = "x") -> None:
    window = meter.begin(devices=None, info=CallInfo(model_name="m", label=label))
    assert meter.end(window, tokens=2, requests=1) is not None


def test_the_meter_alone_starts_no_ledger(tmp_path):
    start_meter(Settings(backend="simulated", ledger_path=tmp_path / "l.sqlite"))
    assert get_meter() is not None
    assert get_ledger() is None
    assert not (tmp_path / "l.sqlite").exists()


def test_start_services_owns_what_it_started_and_stops_it(tmp_path):
    path = tmp_path / "l.sqlite"
    services = start_services(Settings(backend="simulated", ledger_path=path))
    assert services.meter is get_meter() is not None
    assert services.ledger is get_ledger() is not None
    assert services.metrics is None  # no port asked for
    _one_record(services.meter, "owned")
    services.stop()
    assert get_meter() is None and get_ledger() is None
    assert [row["label"] for row in read_rows(path)] == ["owned"]  # written before it stopped
    services.stop()  # idempotent
    assert services == Services()


def test_start_services_leaves_running_parts_to_their_owner(tmp_path):
    meter = start_meter(Settings(backend="simulated", ledger_path=None))
    ledger = ledger_mod.start_ledger(Settings(ledger_path=tmp_path / "other.sqlite"))
    services = start_services(Settings(backend="simulated", ledger_path=tmp_path / "l.sqlite"))
    assert services.meter is None and services.ledger is None
    services.stop()
    assert get_meter() is meter and get_ledger() is ledger


def test_a_meter_that_cannot_start_leaves_no_ledger_behind(tmp_path, monkeypatch):
    import ecoguard.energy

    def no_driver(settings):
        raise RuntimeError("no driver")

    monkeypatch.setattr(ecoguard.energy, "start_meter", no_driver)
    services = start_services(
        Settings(backend="simulated", ledger_path=tmp_path / "l.sqlite"), stage="test"
    )
    assert services == Services(stage="test")
    assert get_ledger() is None and get_meter() is None
    assert fault_counts().get("test.start_meter") == 1


def test_measure_off_starts_neither_meter_nor_ledger(tmp_path):
    services = start_services(
        Settings(backend="simulated", measure=False, ledger_path=tmp_path / "l.sqlite")
    )
    assert services == Services()
    assert get_meter() is None and get_ledger() is None


def test_install_starts_the_ledger_with_the_meter_and_uninstall_stops_both(tmp_path):
    path = tmp_path / "l.sqlite"
    install(mode="warn", backend="simulated", ledger_path=path, measure=True)
    meter, ledger = get_meter(), get_ledger()
    assert meter is not None and ledger is not None
    _one_record(meter, "guarded")
    install(mode="warn", backend="simulated", ledger_path=path, measure=True)  # again: same
    assert get_meter() is meter and get_ledger() is ledger
    uninstall()
    assert get_meter() is None and get_ledger() is None
    assert [row["label"] for row in read_rows(path)] == ["guarded"]


def test_install_over_a_running_meter_still_gets_a_ledger(tmp_path):
    """A meter started before install (an application's own start_meter) used to bring the
    ledger with it; now install brings it, so records keep reaching the ledger."""
    path = tmp_path / "l.sqlite"
    meter = start_meter(Settings(backend="simulated", ledger_path=path))
    install(mode="warn", settings=Settings(backend="simulated", ledger_path=path))
    _one_record(meter, "after-install")
    uninstall()
    assert get_meter() is meter  # not install's to stop
    assert [row["label"] for row in read_rows(path)] == ["after-install"]


def test_ecoguard_measure_starts_the_meter_and_its_ledger_from_the_environment(
    tmp_path, monkeypatch
):
    import ecoguard

    path = tmp_path / "l.sqlite"
    monkeypatch.setenv("ECOGUARD_BACKEND", "simulated")
    monkeypatch.setenv("ECOGUARD_LEDGER", str(path))
    assert ecoguard.measure is measure
    seen = []
    unsubscribe = events.records.subscribe(seen.append)
    try:
        with ecoguard.measure("block") as block:
            _one_record(get_meter(), None)
    finally:
        unsubscribe()
    assert get_ledger() is not None and get_ledger().flush(5.0)
    assert [r.label for r in block.records] == ["block"] and len(seen) == 1
    assert [row["label"] for row in read_rows(path)] == ["block"]


_WORKER = """
from ecoguard.config import Settings
from ecoguard.services import start_services
start_services(Settings(measure=False, mode="warn"))
"""


def test_a_worker_under_prometheus_multiproc_starts_its_finding_series_at_zero(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR set, start_services turns on the worker export with the
    worker's settings: every enabled rule's finding series exists (at 0) for the sidecar."""
    import subprocess
    import sys

    from prometheus_client.parser import text_string_to_metric_families

    from ecoguard.export import prometheus
    from ecoguard.export.exporter_cli import build_registry

    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    worker = subprocess.run(
        [sys.executable, "-c", _WORKER], env=env, capture_output=True, text=True, timeout=120
    )
    assert worker.returncode == 0, worker.stderr
    text = prometheus.render_text(build_registry(Settings(), None, str(tmp_path))).decode()
    findings = [
        sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "ecoguard_findings_total"
    ]
    assert findings and all(sample.value == 0 for sample in findings)
    assert {"rule": "int8-mixed", "mood": "orange", "action": "warn"} in [
        {k: v for k, v in s.labels.items() if k in ("rule", "mood", "action")} for s in findings
    ]
