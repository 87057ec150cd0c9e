"""docs/kubernetes.md says what the manifests and rules do: its label table, its overlay and
tariff examples and its series count are checked against them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from test_manifests import DEPLOY, _kustomize, _one  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "kubernetes.md").read_text()
FLEET_RULES = REPO / "grafana" / "prometheus" / "ecoguard-fleet-rules.yml"
PER_EXPORTER = {
    "ecoguard_sampler_last_sample_timestamp_seconds",
    "ecoguard_sampler_samples_total",
    "ecoguard_sampler_rate_hertz",
    "ecoguard_config_info",
}


def _yaml_block(first_line: str) -> str:
    """The fenced yaml block of the doc whose first line is ``first_line``."""
    for block in re.findall(r"```yaml\n(.*?)```", DOC, flags=re.S):
        if block.splitlines()[0].strip() == first_line:
            return block
    raise AssertionError(f"no yaml block starting with {first_line!r} in docs/kubernetes.md")


def test_dcgm_label_table_is_the_rules_mapping():
    section = DOC.split("## Beside DCGM-exporter", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(\w+)` \| `(\w+)` \|", section, flags=re.M))
    text = FLEET_RULES.read_text()
    in_rules = {
        (source, target)
        for target, source in re.findall(r'"(\w+)", "\$1", "(\w+)", "\(\.\+\)"', text)
    }
    assert in_rules  # the regex still finds the label_replace calls
    assert documented == in_rules


def test_overlay_example_renders_with_image_and_selector_label(tmp_path):
    overlay = tmp_path / "my-cluster"
    overlay.mkdir()
    text = _yaml_block("# my-cluster/kustomization.yaml")
    text = text.replace("../deploy/kubernetes", os.path.relpath(DEPLOY, overlay))
    (overlay / "kustomization.yaml").write_text(text)
    objects = _kustomize(overlay)
    container = _one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/ecoguard-exporter:0.1.0"
    assert all(o["metadata"]["labels"]["release"] == "kube-prometheus-stack" for o in objects)


def test_tariff_patch_example_changes_the_two_rules(tmp_path):
    overlay = tmp_path / "tariff"
    overlay.mkdir()
    patch = yaml.safe_load(_yaml_block("# in my-cluster/kustomization.yaml"))
    (overlay / "kustomization.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY, overlay)],
                **patch,
            }
        )
    )
    rules = {
        rule.get("record"): rule["expr"]
        for group in _one(_kustomize(overlay), "PrometheusRule", "ecoguard-fleet-rules")["spec"][
            "groups"
        ]
        for rule in group["rules"]
    }
    assert rules["fleet:electricity_price_usd_per_kwh"].startswith("0.25 + 0 * group by (cluster)")
    assert rules["fleet:grid_intensity_gco2_per_kwh"].startswith("56 + 0 * group by (cluster)")
    assert rules["fleet:power_usage_effectiveness:ratio"].startswith("1.1 + 0 *")


def test_network_policy_patch_example_admits_another_namespace(tmp_path):
    overlay = tmp_path / "observability"
    overlay.mkdir()
    block = _yaml_block(
        "# in my-cluster/kustomization.yaml: Prometheus runs in the observability namespace"
    )
    (overlay / "kustomization.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY, overlay)],
                **yaml.safe_load(block),
            }
        )
    )
    policy = _one(_kustomize(overlay), "NetworkPolicy", "ecoguard-exporter")
    assert policy["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}
    ]


def test_series_per_gpu_and_per_exporter_as_documented(tmp_path):
    """Sizing names the 5 series per GPU and the 4 per exporter: what the exporter serves."""
    match = re.search(r"\n5 per GPU \((.*?)\) plus 4 per exporter", DOC, flags=re.S)
    assert match, "the sizing sentence changed: update this test with it"
    documented = set(re.findall(r"`(ecoguard_gpu_\w+)`", match.group(1)))
    assert len(documented) == 5
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    env["HOME"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "ecoguard", "exporter", "--once", "--backend", "simulated"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    series = [line for line in result.stdout.splitlines() if line and not line.startswith("#")]
    per_gpu = {line.split("{")[0] for line in series if 'uuid="' in line}
    # Idle power shows once it has been measured; the other four from the start.
    assert per_gpu <= documented, per_gpu
    assert documented - per_gpu <= {"ecoguard_gpu_idle_power_watts"}, per_gpu
    # The sampler's rate gauge appears once it has a rate; the other three from the start.
    per_exporter = {line.split("{")[0].split()[0] for line in series if 'uuid="' not in line}
    assert per_exporter <= PER_EXPORTER, per_exporter
    assert PER_EXPORTER - per_exporter <= {"ecoguard_sampler_rate_hertz"}, per_exporter
