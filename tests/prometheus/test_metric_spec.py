"""One definition per metric: the METRICS rows drive the in-process server and the sidecar.

The same records go through both paths (in-process aggregates; a worker's multiprocess files
merged by the ``ecoguard exporter`` registry) and the two expositions are parsed with
prometheus_client's parser: same families, types, HELP, label names, buckets and values.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prom_fakes import FakeMeter, FakeRecord, parity_findings, parity_records

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ecoguard.config import Settings
from ecoguard.export import prometheus as prom
from ecoguard.export.prometheus.facts import RecordFacts
from ecoguard.export.prometheus.spec import (
    CALL_METRICS,
    ENERGY_COST,
    METRICS,
    WORKER_METRICS,
    MetricSpec,
)

pytestmark = pytest.mark.usefixtures("clean_metrics")

MAX_MODELS = 2  # parity_records() has three model names: one folds into "other"

_WORKER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {fakes_dir!r})
    from prom_fakes import parity_findings, parity_records
    from ecoguard import events
    from ecoguard.config import Settings
    from ecoguard.export.prometheus import enable_worker_export
    enabled = enable_worker_export(max_models={max_models}, settings=Settings())
    assert enabled, "multiprocess export not enabled"
    for record in parity_records():
        events.records.publish(record)
    for event in parity_findings():
        events.findings.publish(event)
    """
)


def exposed(spec: MetricSpec) -> tuple[str, str]:
    """(family name, type) as the text format and its parser show a METRICS row."""
    if spec.kind == "info":
        return f"{spec.name}_info", "gauge"
    return spec.name, spec.kind


def _meter() -> FakeMeter:
    meter = FakeMeter.with_gpus(2)
    meter.advance(1.0, now_monotonic=5.0)
    return meter


def in_process_text() -> str:
    aggregates = prom.GenerationAggregates(max_models=MAX_MODELS)
    for record in parity_records():
        aggregates.observe_record(record)
    for event in parity_findings():
        aggregates.observe_finding(event)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        prom.EcoguardCollector(aggregates=aggregates, meter=_meter(), settings=Settings())
    )
    return prom.render_text(registry).decode()


def sidecar_text(multiproc: Path) -> str:
    from ecoguard.export.exporter_cli import build_registry

    code = _WORKER.format(fakes_dir=str(Path(__file__).parent), max_models=MAX_MODELS)
    env = {"PROMETHEUS_MULTIPROC_DIR": str(multiproc), "PATH": "/usr/bin:/bin"}
    worker = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert worker.returncode == 0, worker.stderr
    registry = build_registry(Settings(), _meter(), str(multiproc))
    return prom.render_text(registry).decode()


def declarations(text: str) -> dict[str, tuple[str, str]]:
    return {f.name: (f.type, f.documentation) for f in text_string_to_metric_families(text)}


def samples(text: str, names: set[str]) -> dict[tuple[str, frozenset], float]:
    """Every sample of the named families, by name and labels."""
    out: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in names:
            continue
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


@pytest.fixture(scope="module")
def expositions(tmp_path_factory) -> tuple[str, str]:
    multiproc = tmp_path_factory.mktemp("multiproc")
    return in_process_text(), sidecar_text(multiproc)


def test_both_paths_declare_every_family_alike_and_only_from_the_table(expositions):
    """Same names, types and HELP on both paths; every family exposed is a METRICS row and
    every row is exposed. A family added to one path only (or by hand, outside the table)
    fails here."""
    local, sidecar = (declarations(text) for text in expositions)
    expected = {exposed(spec)[0]: (exposed(spec)[1], spec.help) for spec in METRICS}
    assert local == expected
    assert sidecar == expected


def test_both_paths_count_the_same_records_alike(expositions):
    """Per-call counters, histograms, the reference gauge, findings and the folded-name gauge:
    the same series with the same values (bad figures skipped on both; a worker given its
    settings starts every enabled rule's finding series at 0, as the in-process collector)."""
    names = {exposed(spec)[0] for spec in WORKER_METRICS}
    local, sidecar = (samples(text, names) for text in expositions)
    assert set(local) == set(sidecar)
    for key, value in local.items():
        assert sidecar[key] == pytest.approx(value), key
    assert all(math.isfinite(value) and value >= 0 for value in local.values())
    folded = local[("ecoguard_folded_model_names", frozenset())]
    assert folded == 1
    never_fired = {"rule": "fp8-eager", "mood": "red", "action": "warn"}
    assert local[("ecoguard_findings_total", frozenset(never_fired.items()))] == 0
    models = {dict(labels).get("model_name") for _, labels in local}
    assert models >= {"tiny-llama", "second", "other"} and "third" not in models


def test_every_per_call_family_is_fed_by_a_record():
    """A per-call row that no record field feeds would show a flat 0 on both paths."""
    facts = RecordFacts.of(parity_records()[1])
    fed = {spec for spec, _ in facts.counter_increments()}
    fed |= {spec for spec, _, _ in facts.observations()}
    assert fed == set(CALL_METRICS)


def test_the_table_is_well_formed():
    names = [spec.name for spec in METRICS]
    assert len(names) == len(set(names))
    for spec in METRICS:
        assert spec.name.startswith("ecoguard_") and not spec.name.endswith("_total"), spec
        assert spec.help and "\n" not in spec.help, spec
        assert bool(spec.buckets) == (spec.kind == "histogram"), spec
        assert list(spec.buckets) == sorted(spec.buckets), spec
        if spec.kind == "gauge" and spec.written_by_workers:
            assert spec.multiprocess_mode, f"{spec.name}: a worker gauge needs a merge mode"
        assert not (spec.kind == "info" and spec.written_by_workers), spec


def test_bad_figures_are_skipped_and_the_rest_of_the_record_counts():
    facts = RecordFacts.of(
        FakeRecord(
            energy_j=float("nan"),
            tokens=-3,
            requests=2,
            batch_size=True,  # type: ignore[arg-type]
            cost_usd=float("-inf"),
            co2_g="many",  # type: ignore[arg-type]
            reference_j_per_token=0.0,
        )
    )
    assert (facts.energy_j, facts.tokens, facts.batch_size, facts.cost_usd, facts.co2_g) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert facts.requests == 2 and facts.reference_j_per_token is None
    aggregates = prom.GenerationAggregates()
    aggregates.observe_record(FakeRecord(energy_j=-1.0, tokens=4, cost_usd=float("nan")))
    (totals,) = aggregates.snapshot().generation.values()
    assert (totals.calls, totals.tokens, totals.energy_j) == (1, 4, 0.0)
    assert totals.total(ENERGY_COST) == 0.0
