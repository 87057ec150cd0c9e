"""Exporter test fixtures. The fakes live in prom_fakes.py (imported by the tests)."""

from __future__ import annotations

import pytest


@pytest.fixture
def clean_metrics():
    """The test leaves no process-wide metrics server or worker export behind."""
    yield
    from ecoguard.export import prometheus

    prometheus.stop_metrics_server()
    prometheus.disable_worker_export()
