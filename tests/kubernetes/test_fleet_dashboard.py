"""The dashboard's fleet row: written by tools/dashboard_panels.py (never by hand), reading only
series the fleet rules record, and showing data for the three-node DCGM fleet of
test_fleet_rules.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import dashboard_panels  # noqa: E402
from test_fleet_rules import _dcgm_fleet, _promtool  # noqa: E402

DASHBOARD = REPO / "grafana" / "dashboards" / "ecoguard-energy.json"
FLEET_RULES = REPO / "grafana" / "prometheus" / "ecoguard-fleet-rules.yml"


def _fleet_targets(dashboard: dict) -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        if panel["id"] in dashboard_panels.FLEET_PANEL_IDS
        for target in panel.get("targets", [])
    ]


def test_fleet_row_in_the_json_is_what_the_script_writes():
    text = DASHBOARD.read_text()
    dashboard = json.loads(text)
    assert dashboard_panels.dashboard_text(dashboard_panels.with_fleet_panels(dashboard)) == text, (
        "the fleet row differs from tools/dashboard_panels.py: run it with --write"
    )
    # Below every other row, with ids no other panel uses.
    fleet = [p for p in dashboard["panels"] if p["id"] in dashboard_panels.FLEET_PANEL_IDS]
    others = [p for p in dashboard["panels"] if p["id"] not in dashboard_panels.FLEET_PANEL_IDS]
    assert fleet[0]["type"] == "row"
    assert min(p["gridPos"]["y"] for p in fleet) >= max(
        p["gridPos"]["y"] + p["gridPos"]["h"] for p in others
    )
    titles = {p["title"] for p in fleet}
    assert "Fleet joules per token by model" in titles
    assert "Fleet joules per token by namespace and model" in titles


def test_writing_twice_changes_nothing_and_keeps_the_other_rows(tmp_path):
    copy = tmp_path / "dashboard.json"
    original = json.loads(DASHBOARD.read_text())
    # A stale fleet row (one panel lost) and the other rows as they are.
    stale = {**original, "panels": original["panels"][:-1]}
    copy.write_text(dashboard_panels.dashboard_text(stale))
    assert dashboard_panels.write_fleet_panels(copy) is True
    assert copy.read_text() == DASHBOARD.read_text()
    assert dashboard_panels.write_fleet_panels(copy) is False


def test_fleet_panels_read_only_recorded_fleet_series():
    recorded = {
        rule["record"]
        for group in yaml.safe_load(FLEET_RULES.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    targets = _fleet_targets(json.loads(DASHBOARD.read_text()))
    assert targets
    for title, expr in targets:
        names = set(re.findall(r"\b(fleet[a-z_]*:[a-z_:0-9]+)", expr))
        assert names, (title, expr)
        assert names <= recorded, (title, names - recorded)


# Series each fleet query returns for the fleet of test_fleet_rules._dcgm_fleet() at 10 min.
EXPECTED_SERIES = {
    "Fleet joules per token by model": 2,  # Qwen, Llama
    "Fleet joules per token by namespace and model": 3,  # llm/Qwen, llm/Llama, research/Qwen
    "Fleet GPU power by cluster and top nodes": 1 + 3,  # the cluster, three nodes
    "Fleet joules per token by node (top 10)": 3,
    "Fleet electricity cost per hour by namespace": 2,
    "Fleet CO2 per hour by namespace": 2,
}


def test_fleet_panels_show_the_fleet(tmp_path):
    """Every fleet query, with Grafana's "All" for the model variable, evaluated on the
    three-node DCGM fleet: each shows its series."""
    by_title: dict[str, list[str]] = {}
    for title, expr in _fleet_targets(json.loads(DASHBOARD.read_text())):
        by_title.setdefault(title, []).append(expr.replace("$model_name", ".*"))
    assert set(by_title) == set(EXPECTED_SERIES)
    checks = [
        {
            "eval_time": "10m",
            "expr": "count(" + " or ".join(f"({expr})" for expr in exprs) + ")",
            "exp_samples": [{"labels": "{}", "value": EXPECTED_SERIES[title]}],
        }
        for title, exprs in by_title.items()
    ]
    result = _promtool(
        tmp_path, [{"interval": "15s", "input_series": _dcgm_fleet(), "promql_expr_test": checks}]
    )
    assert result.returncode == 0, result.stdout + result.stderr
