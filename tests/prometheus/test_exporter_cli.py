"""The `ecoguard exporter` sidecar as a command."""

from __future__ import annotations

import os
import subprocess
import sys


def test_sidecar_once_serves_device_metrics_and_keeps_no_ledger(tmp_path):
    """The sidecar samples the GPUs and prints one scrape; it serves no generate calls, so it
    must not open a ledger of its own (no database file, config_info says so)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    result = subprocess.run(
        [sys.executable, "-m", "ecoguard", "exporter", "--once", "--backend", "simulated"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "ecoguard_gpu_power_watts{" in result.stdout
    assert 'ledger="off"' in result.stdout
    assert not (tmp_path / "xdg" / "ecoguard" / "ledger.sqlite").exists()
