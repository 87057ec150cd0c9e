#!/usr/bin/env python3
"""Write the generated rows of the Grafana dashboard JSON: the serving-engine row and the fleet
(Kubernetes) row, from the tables below (never by hand).

Usage::

    .venv/bin/python tools/dashboard_panels.py --write   # rewrite grafana/dashboards/...json
    .venv/bin/python tools/dashboard_panels.py --check   # exit 1 when the JSON is stale

The PNG renderer (``tools/render_dashboard.py``) draws whatever the JSON holds; this script only
generates the JSON, so the two jobs change apart. tests/kubernetes/test_fleet_dashboard.py and
tests/engines/test_engine_rules.py check that the committed JSON holds exactly these rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = REPO_ROOT / "grafana" / "dashboards" / "ecoguard-energy.json"


# --------------------------------------------------------------------------- fleet panels
#
# The "Fleet (Kubernetes)" row is written into the dashboard JSON by this script
# (`--write`), never by hand: tests/kubernetes/test_fleet_dashboard.py checks that
# the JSON holds exactly what fleet_panels() returns. It reads the fleet recording rules of
# grafana/prometheus/ecoguard-fleet-rules.yml (docs/kubernetes.md).

FLEET_PANEL_IDS = range(200, 300)  # the row and its panels; other rows keep their own ids
FLEET_NO_DATA = "no Kubernetes pod labels (namespace, pod) in this run: the fleet rules need them"

_FLEET_PANELS = (
    # (title, unit, description, [(expr, legend)])
    (
        "Fleet joules per token by model",
        "J",
        "GPU energy over generated tokens for each model across the fleet (every namespace and "
        "node of each cluster), from the fleet recording rules.",
        [
            (
                'fleet_model:energy_per_token_joules:rate5m{model_name=~"$model_name"}',
                "{{cluster}} {{model_name}}",
            )
        ],
    ),
    (
        "Fleet joules per token by namespace and model",
        "J",
        "The same figure per namespace: which team serves a model at what energy per token.",
        [
            (
                'fleet_namespace_model:energy_per_token_joules:rate5m{model_name=~"$model_name"}',
                "{{cluster}} {{namespace}} {{model_name}}",
            )
        ],
    ),
    (
        "Fleet GPU power by cluster and top nodes",
        "watt",
        "Every GPU's power from its energy counter (ecoguard's sampler, else DCGM-exporter), "
        "idle GPUs included: per cluster, and the ten nodes drawing most.",
        [
            ("fleet_cluster:gpu_power_watts:rate5m", "{{cluster}} all GPUs"),
            ("topk(10, fleet_node:gpu_power_watts:rate5m)", "{{cluster}} {{node}}"),
        ],
    ),
    (
        "Fleet joules per token by node (top 10)",
        "J",
        "Energy per token of the serving pods on each node; the ten highest.",
        [("topk(10, fleet_node:energy_per_token_joules:rate5m)", "{{cluster}} {{node}}")],
    ),
    (
        "Fleet electricity cost per hour by namespace",
        "currencyUSD",
        "GPU power of each namespace's pods (idle pods included) at the fleet tariff "
        "(fleet:electricity_price_usd_per_kwh x PUE).",
        [("fleet_namespace:cost_usd_per_hour:rate5m", "{{cluster}} {{namespace}}")],
    ),
    (
        "Fleet CO2 per hour by namespace",
        "massg",
        "GPU power of each namespace's pods at the fleet grid intensity "
        "(fleet:grid_intensity_gco2_per_kwh x PUE).",
        [("fleet_namespace:co2_grams_per_hour:rate5m", "{{cluster}} {{namespace}}")],
    ),
)


def fleet_panels(top: int) -> list[dict[str, Any]]:
    """The fleet row and its panels, laid out from grid row ``top`` down, two panels a row."""
    return row_panels(
        FLEET_PANEL_IDS,
        "Fleet (Kubernetes: by model, namespace, node and cluster)",
        _FLEET_PANELS,
        top,
    )


def row_panels(
    ids: range, row_title: str, specs: tuple[tuple[Any, ...], ...], top: int
) -> list[dict[str, Any]]:
    """A generated row: the row panel (``ids[0]``) and one timeseries panel per
    (title, unit, description, [(expr, legend), ...]) spec, two a row, from grid row ``top``."""
    datasource = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    panels: list[dict[str, Any]] = [
        {
            "id": ids[0],
            "type": "row",
            "title": row_title,
            "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": top},
            "panels": [],
        }
    ]
    for index, (title, unit, description, targets) in enumerate(specs):
        panels.append(
            {
                "id": ids[1 + index],
                "type": "timeseries",
                "title": title,
                "description": description,
                "datasource": datasource,
                "gridPos": {
                    "h": 8,
                    "w": 12,
                    "x": 12 * (index % 2),
                    "y": top + 1 + 8 * (index // 2),
                },
                "fieldConfig": {
                    "defaults": {
                        "unit": unit,
                        "custom": {
                            "drawStyle": "line",
                            "lineWidth": 1,
                            "fillOpacity": 10,
                            "showPoints": "never",
                            "spanNulls": False,
                        },
                    },
                    "overrides": [],
                },
                "options": {
                    "legend": {
                        "displayMode": "table",
                        "placement": "bottom",
                        "showLegend": True,
                        "calcs": ["lastNotNull", "mean"],
                    },
                    "tooltip": {"mode": "multi", "sort": "desc"},
                },
                "targets": [
                    {
                        "datasource": datasource,
                        "refId": chr(ord("A") + number),
                        "expr": expr,
                        "legendFormat": legend,
                        "range": True,
                        "instant": False,
                        "editorMode": "code",
                    }
                    for number, (expr, legend) in enumerate(targets)
                ],
            }
        )
    return panels


def with_fleet_panels(dashboard: dict[str, Any]) -> dict[str, Any]:
    """``dashboard`` with its fleet row replaced by fleet_panels(), below every other panel."""
    others = [p for p in dashboard["panels"] if p.get("id") not in FLEET_PANEL_IDS]
    top = max((p["gridPos"]["y"] + p["gridPos"]["h"] for p in others), default=0)
    return {**dashboard, "panels": others + fleet_panels(top)}


def dashboard_text(dashboard: dict[str, Any]) -> str:
    """The dashboard file's format: two-space JSON and a final newline."""
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def write_fleet_panels(path: Path = DASHBOARD) -> bool:
    """Rewrite ``path`` with the current fleet panels; True when it changed."""
    current = path.read_text()
    updated = dashboard_text(with_fleet_panels(json.loads(current)))
    if updated != current:
        path.write_text(updated)
    return updated != current


# --------------------------------------------------------------------------- engine panels

# The serving-engine row (vLLM, TGI, SGLang, llama.cpp with no plugin: the sidecar's GPU energy
# over the engine's own token counters, grafana/prometheus/ecoguard-engine-rules.yml, see
# docs/engines.md) is written into the JSON by this script too (`--write`), just
# above the fleet row; tests/engines/test_engine_rules.py checks the JSON holds it.
ENGINE_PANEL_IDS = range(300, 400)
ENGINE_NO_DATA = "no serving engine (vLLM, TGI, SGLang, llama.cpp) is scraped in this run"

_ENGINE_PANELS = (
    (
        "Engine joules per token",
        "J",
        "GPU energy of each engine pod (the ecoguard exporter sidecar) over the tokens its engine "
        "reports (vllm:generation_tokens_total, tgi_request_generated_tokens, "
        "sglang:generation_tokens_total, llamacpp:tokens_predicted_total), joined on namespace "
        "and pod: per engine and model over all its pods (idle replicas included), and per pod.",
        [
            ("engine_model:energy_per_token_joules:rate5m", "{{engine}} {{model_name}}"),
            ("engine:energy_per_token_joules:rate5m", "{{engine}} {{pod}}"),
        ],
    ),
    (
        "Engine power per running request",
        "watt",
        "GPU power of each engine pod over its mean number of running requests "
        "(vllm:num_requests_running, tgi_batch_current_size, sglang:num_running_reqs, "
        "llamacpp:requests_processing): it falls as batching improves.",
        [("engine:power_per_running_request_watts:avg5m", "{{engine}} {{pod}}")],
    ),
)


def engine_panels(top: int) -> list[dict[str, Any]]:
    """The serving-engine row and its panels, from grid row ``top`` down."""
    return row_panels(
        ENGINE_PANEL_IDS,
        "Serving engines (sidecar GPU energy / engine tokens)",
        _ENGINE_PANELS,
        top,
    )


def with_engine_panels(dashboard: dict[str, Any]) -> dict[str, Any]:
    """``dashboard`` with its engine row replaced by engine_panels(), below the hand-kept rows
    and above the fleet row (which moves down to make room)."""
    generated = (*ENGINE_PANEL_IDS, *FLEET_PANEL_IDS)
    others = [p for p in dashboard["panels"] if p.get("id") not in generated]
    top = max((p["gridPos"]["y"] + p["gridPos"]["h"] for p in others), default=0)
    return with_fleet_panels({**dashboard, "panels": others + engine_panels(top)})


def write_engine_panels(path: Path = DASHBOARD) -> bool:
    """Rewrite ``path`` with the current engine (and fleet) rows; True when it changed."""
    current = path.read_text()
    updated = dashboard_text(with_engine_panels(json.loads(current)))
    if updated != current:
        path.write_text(updated)
    return updated != current


# Why a generated row's query comes back empty in a run without that setup (the PNG renderer
# writes these under the panel): keyed by the start of the recorded series' name.
NO_DATA_REASONS = {
    "fleet_": FLEET_NO_DATA,
    "engine:": ENGINE_NO_DATA,
    "engine_model:": ENGINE_NO_DATA,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--write", action="store_true", help="write the engine and fleet rows into the JSON"
    )
    action.add_argument(
        "--check", action="store_true", help="exit 1 when the JSON differs from the tables"
    )
    args = parser.parse_args(argv)
    name = DASHBOARD.relative_to(REPO_ROOT)
    if args.check:
        current = DASHBOARD.read_text()
        stale = dashboard_text(with_engine_panels(json.loads(current))) != current
        print(
            f"{name}: {'stale: run tools/dashboard_panels.py --write' if stale else 'up to date'}"
        )
        return 1 if stale else 0
    changed = write_engine_panels()
    print(f"{name}: {'updated' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
