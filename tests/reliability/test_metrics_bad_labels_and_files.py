"""One bad value costs its own series or file, never the scrape (issue 29).

Before: a model name UTF-8 cannot encode (``"evil\\udcff"``, what ``os.fsdecode`` makes of a
non-UTF-8 byte) made every scrape a 500 for the rest of the process, all models' and GPUs'
series lost; one empty or damaged worker file in the multiprocess folder made every exporter
scrape a 500 with nothing logged (``--once`` printed a traceback).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import urllib.request

import pytest

pytest.importorskip("prometheus_client")

import ecoguard
from ecoguard.cli import main
from ecoguard.energy import CallInfo, get_meter
from ecoguard.export.prometheus import render_text
from ecoguard.export.prometheus.multiprocess import WorkerFilesCollector
from ecoguard.faults import fault_counts

BAD_NAMES = ["evil\udcff", "json\ud800lone"]


def _produce(model_name: str, n: int = 1) -> None:
    meter = get_meter()
    assert meter is not None
    for _ in range(n):
        window = meter.begin(devices=None, info=CallInfo(model_name=model_name))
        meter.end(window, tokens=3, requests=1)


def test_an_unencodable_model_name_is_escaped_in_its_own_series_and_every_scrape_answers():
    from ecoguard.export.prometheus import GenerationAggregates, start_metrics_server

    settings = ecoguard.install(backend="simulated", ledger_path="off")
    aggregates = GenerationAggregates()  # fresh: other tests' models do not fill the label cap
    server = start_metrics_server(settings.with_(metrics_port=0), aggregates=aggregates)
    assert server is not None
    _produce("good-model", 2)
    for name in BAD_NAMES:
        _produce(name)
    for _ in range(2):  # every scrape, not only the first
        with urllib.request.urlopen(server.url, timeout=30) as response:
            assert response.status == 200
            body = response.read().decode("utf-8")
        requests = {
            line.split('model_name="', 1)[1].split('"', 1)[0]: line.rsplit(" ", 1)[1]
            for line in body.splitlines()
            if line.startswith("ecoguard_generation_requests_total{")
        }
        # the exposition doubles the backslash of the escape text
        assert requests == {"good-model": "2.0", "evil\\\\xff": "1.0", "json\\\\ud800lone": "1.0"}
        assert "ecoguard_gpu_power_watts{" in body  # the GPUs' series are all still there
    assert fault_counts().get("metrics.label_escaped", 0) >= len(BAD_NAMES)
    aggregates.unsubscribe()


def test_the_serializer_escapes_a_bad_label_from_any_source():
    """Labels that bypass the label helper (a custom collector's) are escaped by the writer."""
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry(auto_describe=False)
    counter = Counter("probe", "probe", ["path"], registry=registry)
    counter.labels("/models/\udcfe").inc()
    counter.labels("/models/ok").inc()
    text = render_text(registry).decode("utf-8")
    assert 'probe_total{path="/models/\\\\xfe"} 1.0' in text
    assert 'probe_total{path="/models/ok"} 1.0' in text


_WORKER_SCRIPT = textwrap.dedent(
    """
    from ecoguard.config import Settings
    from ecoguard.energy import CallInfo, start_meter
    from ecoguard.export.prometheus.multiprocess import enable_worker_export
    assert enable_worker_export()
    meter = start_meter(Settings(backend="simulated", ledger_path=None))
    for name in ("worker-model", "evil\\udcff"):
        window = meter.begin(devices=None, info=CallInfo(model_name=name))
        meter.end(window, tokens=3, requests=1)
    meter.stop()
    """
)


def _worker_files(tmp_path) -> str:
    """A multiprocess folder written by one real worker (a subprocess, as in production)."""
    folder = tmp_path / "prom"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    out = subprocess.run(
        [sys.executable, "-c", _WORKER_SCRIPT], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert any(name.endswith(".db") for name in os.listdir(folder))
    return str(folder)


def test_a_worker_with_an_unencodable_model_name_keeps_writing_its_counters(tmp_path):
    folder = _worker_files(tmp_path)
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    WorkerFilesCollector(registry, path=folder)
    text = render_text(registry).decode("utf-8")
    assert 'model_name="worker-model"' in text
    assert 'model_name="evil\\\\xff"' in text


def _bad_key(real: bytes) -> bytes:
    """A real worker file whose first key is no longer JSON."""
    at = real.index(b'["')
    return real[:at] + b"{{" + real[at + 2 :]


@pytest.mark.parametrize(
    "damage",
    [
        lambda real: b"",
        lambda real: b"\x00" * 3,
        lambda real: real[:40],  # cut inside its first entry
        _bad_key,
        lambda real: b"\x10\x00\x00\x00\x00\x00\x00\x00" + b"\x7f" * 64,
    ],
    ids=["empty", "short", "truncated", "bad-key", "bad-entry"],
)
def test_a_damaged_worker_file_is_skipped_logged_once_and_counted(tmp_path, damage, caplog):
    folder = _worker_files(tmp_path)
    real = next(name for name in sorted(os.listdir(folder)) if name.startswith("counter_"))
    with open(os.path.join(folder, real), "rb") as f:
        data = f.read()
    bad = os.path.join(folder, "counter_999999.db")
    with open(bad, "wb") as f:
        f.write(damage(data))
    caplog.set_level(logging.ERROR, logger="ecoguard.metrics")
    from ecoguard.export.exporter_cli import build_registry

    registry = build_registry(None, None, folder)
    for _ in range(3):  # every scrape answers; the file is reported once
        text = render_text(registry).decode("utf-8")
        assert 'ecoguard_generation_requests_total{gpu_name="' in text
        assert 'model_name="worker-model"' in text
    reports = [r for r in caplog.records if "counter_999999.db" in r.getMessage()]
    assert len(reports) == 1, caplog.text
    assert fault_counts().get("metrics.worker_file") == 1


def test_exporter_once_serves_gpus_and_good_workers_beside_a_damaged_file(tmp_path, capsys):
    folder = _worker_files(tmp_path)
    with open(os.path.join(folder, "histogram_123.db"), "wb"):
        pass  # an empty file: a worker killed while creating it
    args = ["exporter", "--once", "--backend", "simulated", "--multiproc-dir", folder]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "ecoguard_gpu_power_watts{" in out
    assert 'model_name="worker-model"' in out
