"""The engine recording rules under `promtool test rules`: J/token and W per running request for
vLLM, TGI, SGLang and llama.cpp from the sidecar's GPU energy and each engine's own counters."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((REPO / "grafana" / "prometheus").glob("*.yml"))
ENGINE_RULES = REPO / "grafana" / "prometheus" / "ecoguard-engine-rules.yml"


def _promtool(tmp_path: Path, tests: list[dict]) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool binary not found (apt-get install prometheus)")
    spec = tmp_path / "engine_rules_test.yml"
    spec.write_text(
        json.dumps(
            {
                "rule_files": [str(p) for p in RULE_FILES],
                "evaluation_interval": "15s",
                "tests": tests,
            }
        )
    )
    return subprocess.run(
        [promtool, "test", "rules", str(spec)], capture_output=True, text=True, timeout=120
    )


def _gpu(pod: str, gpu: str, joules_per_scrape: float) -> dict:
    # What `ecoguard exporter` in the pod exports, with the labels Kubernetes SD adds.
    return {
        "series": "ecoguard_gpu_energy_joules_total{"
        f'namespace="llm",pod="{pod}",gpu="{gpu}",uuid="GPU-{pod}-{gpu}",'
        f'gpu_name="NVIDIA A100-SXM4-80GB",instance="{pod}:9465",job="ecoguard"}}',
        "values": f"1000+{joules_per_scrape}x40",
    }


def _engine(metric: str, pod: str, values: str, extra: str = "") -> dict:
    labels = f'namespace="llm",pod="{pod}",instance="{pod}:8000",job="engines"{extra}'
    return {"series": f"{metric}{{{labels}}}", "values": values}


VLLM_MODEL = ',model_name="Qwen/Qwen2.5-7B-Instruct",engine="0"'
SGLANG_MODEL = ',model_name="meta-llama/Llama-3.1-8B-Instruct",tp_rank="0"'

SERIES = [
    # vLLM, TP=2: two GPUs at 150 W each (2250 J per 15 s scrape), 100 tokens/s, 8 running.
    _gpu("vllm-0", "0", 2250),
    _gpu("vllm-0", "1", 2250),
    _engine("vllm:generation_tokens_total", "vllm-0", "0+1500x40", VLLM_MODEL),
    _engine("vllm:num_requests_running", "vllm-0", "8x40", VLLM_MODEL),
    # TGI: 200 W, 50 tokens/s (the histogram's _sum), batch of 4; TGI has no model label.
    _gpu("tgi-0", "0", 3000),
    _engine("tgi_request_generated_tokens_sum", "tgi-0", "0+750x40"),
    _engine("tgi_batch_current_size", "tgi-0", "4x40"),
    # SGLang, one model on two pods: 400 W / 200 tok/s and 200 W / 50 tok/s.
    _gpu("sglang-0", "0", 6000),
    _engine("sglang:generation_tokens_total", "sglang-0", "0+3000x40", SGLANG_MODEL),
    _engine("sglang:num_running_reqs", "sglang-0", "16x40", SGLANG_MODEL),
    _gpu("sglang-1", "0", 3000),
    _engine("sglang:generation_tokens_total", "sglang-1", "0+750x40", SGLANG_MODEL),
    _engine("sglang:num_running_reqs", "sglang-1", "2x40", SGLANG_MODEL),
    # llama.cpp: 90 W, 30 tokens/s, one slot busy; the server restarts (counter reset) at 5 min
    # and has predicted 450 tokens by the next scrape.
    _gpu("llamacpp-0", "0", 1350),
    _engine(
        "llamacpp:tokens_predicted_total",
        "llamacpp-0",
        "0+450x19 450+450x20",
        ',model_name="qwen2.5-7b-q4_k_m.gguf"',
    ),
    _engine("llamacpp:requests_processing", "llamacpp-0", "1x40"),
    # An idle vLLM pod: 60 W, no tokens, nothing running. No J/token, no W/request.
    _gpu("vllm-idle", "0", 900),
    _engine(
        "vllm:generation_tokens_total",
        "vllm-idle",
        "500x40",
        ',model_name="Qwen/Qwen2.5-7B-Instruct",engine="0"',
    ),
    _engine(
        "vllm:num_requests_running",
        "vllm-idle",
        "0x40",
        ',model_name="Qwen/Qwen2.5-7B-Instruct",engine="0"',
    ),
]


def _sample(labels: str, value: float) -> dict:
    return {"labels": labels, "value": value}


def _named(name: str, samples: list[dict]) -> list[dict]:
    return [{**item, "labels": name + item["labels"]} for item in samples]


def test_joules_per_token_per_engine_pod_and_model(tmp_path):
    vllm = 'engine="vllm",model_name="Qwen/Qwen2.5-7B-Instruct",namespace="llm"'
    sglang = 'engine="sglang",model_name="meta-llama/Llama-3.1-8B-Instruct",namespace="llm"'
    llama = 'engine="llamacpp",model_name="qwen2.5-7b-q4_k_m.gguf",namespace="llm"'
    result = _promtool(
        tmp_path,
        [
            {
                "interval": "15s",
                "input_series": SERIES,
                "promql_expr_test": [
                    {
                        "eval_time": "9m",
                        # In mJ, rounded: promtool compares floats exactly, and rate()
                        # leaves residues like 3.0000000000000004.
                        "expr": "round(1000 * engine:energy_per_token_joules:rate5m)",
                        "exp_samples": _named(
                            "",
                            [
                                # 300 W / 100 tok/s
                                _sample(f'{{{vllm},pod="vllm-0"}}', 3000),
                                # 200 W / 50 tok/s
                                _sample('{engine="tgi",namespace="llm",pod="tgi-0"}', 4000),
                                _sample(f'{{{sglang},pod="sglang-0"}}', 2000),
                                _sample(f'{{{sglang},pod="sglang-1"}}', 4000),
                                # 90 W / 30 tok/s, across the counter reset
                                _sample(f'{{{llama},pod="llamacpp-0"}}', 3000),
                            ],
                        ),
                    },
                    {
                        "eval_time": "9m",
                        # In mJ, rounded: promtool compares floats exactly, and rate()
                        # leaves residues like 3.0000000000000004.
                        "expr": "round(1000 * engine_model:energy_per_token_joules:rate5m)",
                        "exp_samples": _named(
                            "",
                            [
                                # (300 + 60) W / 100 tok/s: the idle replica serving the same
                                # model is part of that model's cost.
                                _sample(
                                    '{engine="vllm",model_name="Qwen/Qwen2.5-7B-Instruct"}', 3600
                                ),
                                _sample('{engine="tgi"}', 4000),
                                # (400 + 200) W / (200 + 50) tok/s = 2.4 J, not the mean of 2 and 4
                                _sample(
                                    '{engine="sglang",model_name="meta-llama/Llama-3.1-8B-Instruct"}',
                                    2400,
                                ),
                                _sample(
                                    '{engine="llamacpp",model_name="qwen2.5-7b-q4_k_m.gguf"}', 3000
                                ),
                            ],
                        ),
                    },
                    {
                        "eval_time": "9m",
                        "expr": "engine:power_per_running_request_watts:avg5m",
                        "exp_samples": _named(
                            "engine:power_per_running_request_watts:avg5m",
                            [
                                _sample(f'{{{vllm},pod="vllm-0"}}', 37.5),
                                _sample('{engine="tgi",namespace="llm",pod="tgi-0"}', 50.0),
                                _sample(f'{{{sglang},pod="sglang-0"}}', 25.0),
                                _sample(f'{{{sglang},pod="sglang-1"}}', 100.0),
                                _sample(
                                    '{engine="llamacpp",namespace="llm",pod="llamacpp-0"}', 90.0
                                ),
                            ],
                        ),
                    },
                    # The idle pod: no J/token and no W/request rather than +Inf.
                    {
                        "eval_time": "9m",
                        "expr": 'engine:energy_per_token_joules:rate5m{pod="vllm-idle"}',
                        "exp_samples": [],
                    },
                    {
                        "eval_time": "9m",
                        "expr": 'engine:power_per_running_request_watts:avg5m{pod="vllm-idle"}',
                        "exp_samples": [],
                    },
                ],
            }
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_engine_rule_file_names_every_engine_counter():
    text = ENGINE_RULES.read_text()
    for counter in (
        "vllm:generation_tokens_total",
        "tgi_request_generated_tokens",
        "sglang:generation_tokens_total",
        "llamacpp:tokens_predicted_total",
        "ecoguard_gpu_energy_joules_total",
    ):
        assert counter in text


def _dashboard_panels():
    import sys

    if str(REPO / "tools") not in sys.path:
        sys.path.insert(0, str(REPO / "tools"))
    import dashboard_panels

    return dashboard_panels


def test_dashboard_engine_row_is_what_the_script_writes():
    render = _dashboard_panels()
    path = REPO / "grafana" / "dashboards" / "ecoguard-energy.json"
    text = path.read_text()
    assert render.dashboard_text(render.with_engine_panels(json.loads(text))) == text, (
        "the engine row differs from tools/dashboard_panels.py: run it with --write"
    )
    panels = json.loads(text)["panels"]
    ids = [p["id"] for p in panels]
    engine = [p for p in panels if p["id"] in render.ENGINE_PANEL_IDS]
    # Just above the fleet row, below every hand-kept row.
    assert engine[0]["type"] == "row"
    assert ids.index(engine[-1]["id"]) + 1 == ids.index(render.FLEET_PANEL_IDS[0])


def test_dashboard_engine_panels_read_these_recorded_series():
    import yaml

    dashboard = json.loads((REPO / "grafana" / "dashboards" / "ecoguard-energy.json").read_text())
    recorded = {
        rule["record"]
        for group in yaml.safe_load(ENGINE_RULES.read_text())["groups"]
        for rule in group["rules"]
    }
    exprs = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "engine" in target["expr"].split(":")[0]
    ]
    assert sorted(exprs) == sorted(
        [
            "engine_model:energy_per_token_joules:rate5m",
            "engine:energy_per_token_joules:rate5m",
            "engine:power_per_running_request_watts:avg5m",
        ]
    )
    assert set(exprs) <= recorded
