"""The alerting rules under `promtool test rules`: synthetic series, exact expected alerts."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((REPO / "grafana" / "prometheus").glob("*.yml"))


def _promtool_test(tmp_path: Path, tests: list[dict]) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool binary not found (apt-get install prometheus)")
    spec = tmp_path / "rules_test.yml"
    spec.write_text(  # JSON is valid YAML
        json.dumps(
            {
                "rule_files": [str(p) for p in RULE_FILES],
                "evaluation_interval": "15s",
                "tests": tests,
            }
        )
    )
    return subprocess.run(
        [promtool, "test", "rules", str(spec)], capture_output=True, text=True, timeout=60
    )


def test_trap_alert_ignores_finding_series_created_at_zero(tmp_path):
    """The collector creates every finding series at 0 so a first firing shows in increase();
    a series at 0 is no trap, even in the first 10 minutes after it appeared."""
    at_zero = 'ecoguard_findings_total{rule="int8-mixed",mood="orange",action="warn",instance="a"}'
    fired = 'ecoguard_findings_total{rule="fp8-eager",mood="red",action="warn",instance="a"}'
    result = _promtool_test(
        tmp_path,
        [
            {
                "interval": "15s",
                "input_series": [
                    {"series": at_zero, "values": "0x40"},
                    # Born at 1 (no 0 sample before it): the `unless ... offset` branch.
                    {"series": fired, "values": "_x4 1x40"},
                ],
                "promql_expr_test": [
                    {
                        "eval_time": "2m",
                        "expr": 'ALERTS{alertname="EcoguardEnergyTrapFound"}',
                        "exp_samples": [
                            {
                                "labels": 'ALERTS{alertname="EcoguardEnergyTrapFound",'
                                'alertstate="firing",rule="fp8-eager",mood="red",action="warn",'
                                'instance="a",severity="warning"}',
                                "value": 1,
                            }
                        ],
                    }
                ],
            }
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_deviation_alert_with_two_reference_tiers_for_one_configuration(tmp_path):
    """Two targets can know the same configuration's reference under different tiers (one host
    has `local` bench rows); the alert must still evaluate instead of failing many-to-many."""
    labels = 'model_name="m",precision="fp16",gpu_name="g"'
    result = _promtool_test(
        tmp_path,
        [
            {
                "interval": "15s",
                "input_series": [
                    {
                        "series": f'ecoguard_generation_energy_joules_total{{{labels},instance="a"}}',
                        "values": "0+30x100",
                    },
                    {
                        "series": f'ecoguard_generation_tokens_total{{{labels},instance="a"}}',
                        "values": "0+100x100",
                    },
                    {
                        "series": "ecoguard_reference_energy_per_token_joules"
                        f'{{{labels},tier="measured",instance="a"}}',
                        "values": "0.1x100",
                    },
                    {
                        "series": "ecoguard_reference_energy_per_token_joules"
                        f'{{{labels},tier="local",instance="b"}}',
                        "values": "0.12x100",
                    },
                ],
                "promql_expr_test": [
                    {
                        "eval_time": "20m",
                        "expr": 'ALERTS{alertname="EcoguardEnergyPerTokenAboveReference"}',
                        # The higher (more lenient) of the two references, with its tier.
                        "exp_samples": [
                            {
                                "labels": 'ALERTS{alertname="EcoguardEnergyPerTokenAboveReference",'
                                'alertstate="firing",model_name="m",precision="fp16",gpu_name="g",'
                                'tier="local",severity="warning"}',
                                "value": 1,
                            }
                        ],
                    }
                ],
            }
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_stuck_counter_alert_needs_no_idle_power_and_spares_a_moving_counter(tmp_path):
    """A GPU whose idle power is unknown (no idle series) still gets the alert when its energy
    counter freezes while it draws power; a GPU whose counter moves does not."""
    stuck = 'gpu="0",uuid="GPU-a",gpu_name="g",instance="a"'
    moving = 'gpu="1",uuid="GPU-b",gpu_name="g",instance="a"'
    result = _promtool_test(
        tmp_path,
        [
            {
                "interval": "15s",
                "input_series": [
                    {"series": f"ecoguard_gpu_energy_joules_total{{{stuck}}}", "values": "5000x80"},
                    {"series": f"ecoguard_gpu_power_watts{{{stuck}}}", "values": "100x80"},
                    {
                        "series": f"ecoguard_gpu_energy_joules_total{{{moving}}}",
                        "values": "0+1500x80",
                    },
                    {"series": f"ecoguard_gpu_power_watts{{{moving}}}", "values": "100x80"},
                ],
                "promql_expr_test": [
                    {
                        "eval_time": "15m",
                        "expr": 'ALERTS{alertname="EcoguardGpuEnergyCounterStuck"}',
                        "exp_samples": [
                            {
                                "labels": 'ALERTS{alertname="EcoguardGpuEnergyCounterStuck",'
                                f'alertstate="firing",{stuck},severity="warning"}}',
                                "value": 1,
                            }
                        ],
                    }
                ],
            }
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr
