"""The fleet recording rules (grafana/prometheus/ecoguard-fleet-rules.yml) under `promtool test
rules`: three nodes, two engines, DCGM-exporter with and without honored labels, a node restart
(counter reset), a DCGM scrape gap, a GPU with only a power gauge, ecoguard's own sampler beside
DCGM, and two clusters with the same pod names (the Thanos/Mimir view)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((REPO / "grafana" / "prometheus").glob("*.yml"))
FLEET_RULES = REPO / "grafana" / "prometheus" / "ecoguard-fleet-rules.yml"
SCRAPE_S = 15
H100 = "NVIDIA H100 80GB HBM3"
QWEN = "Qwen/Qwen2.5-7B-Instruct"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _promtool(tmp_path: Path, tests: list[dict]) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool binary not found (apt-get install prometheus)")
    spec = tmp_path / "fleet_rules_test.yml"
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
        [promtool, "test", "rules", str(spec)], capture_output=True, text=True, timeout=120
    )


def _labels(**labels: str) -> str:
    return ",".join(f'{key}="{value}"' for key, value in labels.items())


def _counter(per_second: float, scrapes: int = 48, start: float = 0.0) -> str:
    """A counter rising ``per_second`` units per second, one value per scrape (promtool's
    expanding notation: ``a+bxn`` is n+1 values)."""
    return f"{start:g}+{per_second * SCRAPE_S:g}x{scrapes}"


def _dcgm_energy(watts: float, values: str | None = None, **labels: str) -> dict:
    """DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION in millijoules, as DCGM-exporter labels it."""
    base = {"gpu": "0", "device": "nvidia0", "modelName": H100, "DCGM_FI_DRIVER_VERSION": "550.54"}
    return {
        "series": f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{_labels(**{**base, **labels})}}}",
        "values": values if values is not None else _counter(watts * 1000, start=5e9),
    }


def _tokens(metric: str, per_second: float, values: str | None = None, **labels: str) -> dict:
    return {
        "series": f"{metric}{{{_labels(**labels)}}}",
        "values": values if values is not None else _counter(per_second),
    }


def _dcgm_fleet(cluster: str | None = None) -> list[dict]:
    """Three nodes under DCGM-exporter only (the overlay: no ecoguard sampler on the nodes).

    node-a: the scrape does not honor labels, so DCGM's pod labels arrive as exported_*; GPU 0
      (300 W) serves vLLM pod llm/vllm-qwen-0 at 100 tok/s; GPU 1 (60 W) is idle, so Prometheus
      gives it only the exporter's own pod and namespace.
    node-b: the scrape honors labels; GPU 0 (400 W) serves SGLang pod llm/sglang-llama-0 at
      200 tok/s. The node restarts at 5 min: DCGM's energy and SGLang's token counters start
      over (the restart came right after the 4:45 scrape, so 5:00 holds 15 s of each).
    node-c: GPU 0 (250 W) serves vLLM pod research/vllm-qwen-1 at 50 tok/s; DCGM's scrape fails
      from 6:15 to 8:00 while the GPU keeps working. GPU 1 (70 W) has no energy counter, only
      DCGM_FI_DEV_POWER_USAGE.
    """
    extra = {} if cluster is None else {"cluster": cluster}
    dcgm_a = dict(
        Hostname="node-a",
        namespace="gpu-operator",
        pod="nvidia-dcgm-exporter-aaaaa",
        container="nvidia-dcgm-exporter",
        instance="10.0.1.1:9400",
        job="nvidia-dcgm-exporter",
        **extra,
    )
    dcgm_b = dict(Hostname="node-b", instance="10.0.1.2:9400", job="nvidia-dcgm-exporter", **extra)
    dcgm_c = dict(
        Hostname="node-c",
        namespace="gpu-operator",
        pod="nvidia-dcgm-exporter-ccccc",
        container="nvidia-dcgm-exporter",
        instance="10.0.1.3:9400",
        job="nvidia-dcgm-exporter",
        **extra,
    )
    reset_b = (  # 20 scrapes before the restart, then from 15 s worth of energy again
        f"5e9+{400 * 1000 * SCRAPE_S:g}x19 {400 * 1000 * SCRAPE_S:g}+{400 * 1000 * SCRAPE_S:g}x28"
    )
    per_scrape_c = 250 * 1000 * SCRAPE_S
    gap_c = (  # 0:00-6:00 (25 values), nothing 6:15-8:00 (8 scrapes), then on from 8:15
        f"5e9+{per_scrape_c:g}x24 _x8 {5e9 + 33 * per_scrape_c:g}+{per_scrape_c:g}x15"
    )
    engine = dict(instance="10.1.0.1:8000", job="engines", **extra)
    return [
        _dcgm_energy(
            300,
            UUID="GPU-a0",
            exported_namespace="llm",
            exported_pod="vllm-qwen-0",
            exported_container="vllm",
            **dcgm_a,
        ),
        _dcgm_energy(60, **{**dcgm_a, "gpu": "1", "device": "nvidia1"}, UUID="GPU-a1"),
        _dcgm_energy(
            400,
            values=reset_b,
            UUID="GPU-b0",
            namespace="llm",
            pod="sglang-llama-0",
            container="sglang",
            **dcgm_b,
        ),
        _dcgm_energy(
            250,
            values=gap_c,
            UUID="GPU-c0",
            exported_namespace="research",
            exported_pod="vllm-qwen-1",
            exported_container="vllm",
            **dcgm_c,
        ),
        {
            "series": "DCGM_FI_DEV_POWER_USAGE{"
            + _labels(gpu="1", UUID="GPU-c1", modelName="Tesla T4", **dcgm_c)
            + "}",
            "values": "70x48",
        },
        _tokens(
            "vllm:generation_tokens_total",
            100,
            namespace="llm",
            pod="vllm-qwen-0",
            model_name=QWEN,
            **engine,
        ),
        _tokens(
            "sglang:generation_tokens_total",
            200,
            values="9000+3000x19 3000+3000x28",
            namespace="llm",
            pod="sglang-llama-0",
            model_name=LLAMA,
            **engine,
        ),
        _tokens(
            "vllm:generation_tokens_total",
            50,
            namespace="research",
            pod="vllm-qwen-1",
            model_name=QWEN,
            **engine,
        ),
    ]


def _expect(eval_time: str, expr: str, samples: list[tuple[str, float]]) -> dict:
    return {
        "eval_time": eval_time,
        "expr": expr,
        "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
    }


def _milli(expr: str) -> str:
    # promtool compares floats exactly and rate() leaves residues such as 3.0000000000000004.
    return f"round(1000 * {expr})"


def test_dcgm_fleet_three_nodes_two_engines_reset_and_gap(tmp_path):
    result = _promtool(
        tmp_path,
        [
            {
                "interval": "15s",
                "input_series": _dcgm_fleet(),
                "promql_expr_test": [
                    # Every GPU once, mapped to ecoguard's labels; the T4 from its power gauge.
                    _expect(
                        "10m",
                        "round(fleet_gpu:power_watts:rate5m)",
                        [
                            (f'{{node="node-a",uuid="GPU-a0",gpu_name="{H100}"}}', 300),
                            (f'{{node="node-a",uuid="GPU-a1",gpu_name="{H100}"}}', 60),
                            (f'{{node="node-b",uuid="GPU-b0",gpu_name="{H100}"}}', 400),
                            (f'{{node="node-c",uuid="GPU-c0",gpu_name="{H100}"}}', 250),
                            ('{node="node-c",uuid="GPU-c1",gpu_name="Tesla T4"}', 70),
                        ],
                    ),
                    # Workload pods only: the idle GPU is not charged to gpu-operator.
                    _expect(
                        "10m",
                        "round(fleet_namespace:gpu_power_watts:rate5m)",
                        [('{namespace="llm"}', 700), ('{namespace="research"}', 250)],
                    ),
                    _expect(
                        "10m",
                        "round(fleet_node:gpu_power_watts:rate5m)",
                        [
                            ('{node="node-a"}', 360),
                            ('{node="node-b"}', 400),
                            ('{node="node-c"}', 320),
                        ],
                    ),
                    _expect("10m", "round(fleet_cluster:gpu_power_watts:rate5m)", [("{}", 1080)]),
                    # J/token: (300 + 250) W / (100 + 50) tok/s for Qwen over two namespaces.
                    _expect(
                        "10m",
                        _milli("fleet_model:energy_per_token_joules:rate5m"),
                        [(f'{{model_name="{QWEN}"}}', 3667), (f'{{model_name="{LLAMA}"}}', 2000)],
                    ),
                    _expect(
                        "10m",
                        _milli("fleet_namespace_model:energy_per_token_joules:rate5m"),
                        [
                            (f'{{namespace="llm",model_name="{QWEN}"}}', 3000),
                            (f'{{namespace="llm",model_name="{LLAMA}"}}', 2000),
                            (f'{{namespace="research",model_name="{QWEN}"}}', 5000),
                        ],
                    ),
                    _expect(
                        "10m",
                        _milli("fleet_namespace:energy_per_token_joules:rate5m"),
                        [('{namespace="llm"}', 2333), ('{namespace="research"}', 5000)],
                    ),
                    _expect(
                        "10m",
                        _milli("fleet_node:energy_per_token_joules:rate5m"),
                        [
                            ('{node="node-a"}', 3000),
                            ('{node="node-b"}', 2000),
                            ('{node="node-c"}', 5000),
                        ],
                    ),
                    # 950 W of serving pods / 350 tok/s (the idle GPUs are in no token's cost).
                    _expect(
                        "10m",
                        _milli("fleet_cluster:energy_per_token_joules:rate5m"),
                        [("{}", 2714)],
                    ),
                    # The node restart is inside this window: rate() carries the counters over
                    # the reset, so node-b still reads 400 W and 2 J/token (not a negative or
                    # a 5 GJ spike).
                    _expect(
                        "6m",
                        'round(fleet_node:gpu_power_watts:rate5m{node="node-b"})',
                        [('{node="node-b"}', 400)],
                    ),
                    _expect(
                        "6m",
                        _milli('fleet_node:energy_per_token_joules:rate5m{node="node-b"}'),
                        [('{node="node-b"}', 2000)],
                    ),
                    # Two minutes into the DCGM scrape gap the GPU is still counted, low:
                    # rate() extrapolates only about half a scrape past the last sample, so the
                    # window reads ~3 of its 5 minutes' energy (156 W of 250) ...
                    _expect(
                        "8m",
                        '(fleet_gpu:power_watts:rate5m{uuid="GPU-c0"} > 100 < 249) * 0 + 1',
                        [(f'{{node="node-c",uuid="GPU-c0",gpu_name="{H100}"}}', 1)],
                    ),
                    # ... and once scrapes resume the energy counter covers the missed minutes:
                    # no joule is lost, as it would be by averaging a power gauge over the gap.
                    _expect(
                        "10m",
                        _milli('fleet_node:energy_per_token_joules:rate5m{node="node-c"}'),
                        [('{node="node-c"}', 5000)],
                    ),
                    # Dollars and CO2 per hour: 1.08 kW x $0.12/kWh x PUE 1.1; x 390 g/kWh x 1.1.
                    _expect(
                        "10m",
                        "round(1e5 * fleet_cluster:cost_usd_per_hour:rate5m)",
                        [("{}", 14256)],
                    ),
                    _expect(
                        "10m",
                        "round(100 * fleet_cluster:co2_grams_per_hour:rate5m)",
                        [("{}", 46332)],
                    ),
                    _expect(
                        "10m",
                        "round(1e5 * fleet_model:cost_usd_per_hour:rate5m)",
                        [(f'{{model_name="{QWEN}"}}', 7260), (f'{{model_name="{LLAMA}"}}', 5280)],
                    ),
                ],
            }
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _ecoguard_gpu(uuid: str, joules_per_second: float, **labels: str) -> dict:
    return {
        "series": "ecoguard_gpu_energy_joules_total{"
        + _labels(gpu="0", uuid=uuid, gpu_name=H100, **labels)
        + "}",
        "values": _counter(joules_per_second, start=1000),
    }


def test_ecoguard_sampler_wins_over_dcgm_and_pods_use_ecoguard_in_the_pod(tmp_path):
    """The base: the DaemonSet samples every GPU of node-a (with `node` and ecoguard_scope from
    its ServiceMonitor), DCGM also runs there; a vLLM pod has ecoguard's sidecar (its own pod
    labels) and the vLLM plugin's token counter besides vLLM's. Each GPU is counted once, the
    DaemonSet's series are nobody's pod, and ecoguard's token count wins over vLLM's."""
    daemonset = dict(
        ecoguard_scope="node",
        node="node-a",
        namespace="ecoguard",
        pod="ecoguard-exporter-x7k2p",
        instance="10.0.0.5:9464",
        job="ecoguard-exporter",
    )
    sidecar = dict(namespace="llm", pod="vllm-0", instance="10.1.0.9:9465", job="sidecars")
    series = [
        _ecoguard_gpu("GPU-a0", 300, **daemonset),
        _ecoguard_gpu("GPU-a1", 300, **daemonset),
        # DCGM on the same GPUs, reading a little differently and run without NODE_NAME (its
        # Hostname is then its own pod's): matched by UUID, never added again.
        _dcgm_energy(
            310, UUID="GPU-a0", Hostname="dcgm-exporter-zz9", namespace="llm", pod="vllm-0"
        ),
        _dcgm_energy(
            310, UUID="GPU-a1", Hostname="dcgm-exporter-zz9", namespace="llm", pod="vllm-0"
        ),
        # ecoguard's sidecar in the vLLM pod (TP=2) reads both GPUs.
        _ecoguard_gpu("GPU-a0", 300, **sidecar),
        _ecoguard_gpu("GPU-a1", 300, **sidecar),
        # The vLLM plugin counts 200 tok/s; vLLM's own counter says 190 (it would be a second
        # count of the same tokens).
        _tokens(
            "ecoguard_generation_tokens_total",
            200,
            namespace="llm",
            pod="vllm-0",
            model_name=QWEN,
            precision="bf16",
            gpu_name=H100,
        ),
        _tokens(
            "vllm:generation_tokens_total", 190, namespace="llm", pod="vllm-0", model_name=QWEN
        ),
    ]
    result = _promtool(
        tmp_path,
        [
            {
                "interval": "15s",
                "input_series": series,
                "promql_expr_test": [
                    _expect(
                        "10m",
                        "round(fleet_node:gpu_power_watts:rate5m)",
                        [('{node="node-a"}', 600)],
                    ),
                    _expect(
                        "10m",
                        "round(fleet_namespace:gpu_power_watts:rate5m)",
                        [('{namespace="llm"}', 600)],
                    ),
                    _expect(
                        "10m",
                        "round(fleet_pod_model:tokens_per_second:rate5m)",
                        [
                            (
                                f'{{engine="ecoguard",namespace="llm",pod="vllm-0",model_name="{QWEN}"}}',
                                200,
                            )
                        ],
                    ),
                    _expect(
                        "10m",
                        _milli("fleet_model:energy_per_token_joules:rate5m"),
                        [(f'{{model_name="{QWEN}"}}', 3000)],
                    ),
                ],
            }
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_two_clusters_with_the_same_pod_names_stay_apart(tmp_path):
    """What a Thanos or Mimir ruler sees: both clusters' series, told apart only by `cluster`
    (the pods, nodes and instances have the same names). Nothing may be joined or summed across
    them, and each cluster gets its own tariff series."""
    east = _dcgm_fleet("east")
    west = _dcgm_fleet("west")
    # West's node-a GPU 0 draws twice as much for the same tokens.
    west[0] = _dcgm_energy(
        600,
        UUID="GPU-a0",
        exported_namespace="llm",
        exported_pod="vllm-qwen-0",
        exported_container="vllm",
        Hostname="node-a",
        namespace="gpu-operator",
        pod="nvidia-dcgm-exporter-aaaaa",
        container="nvidia-dcgm-exporter",
        instance="10.0.1.1:9400",
        job="nvidia-dcgm-exporter",
        cluster="west",
    )
    result = _promtool(
        tmp_path,
        [
            {
                "interval": "15s",
                "input_series": east + west,
                "promql_expr_test": [
                    _expect(
                        "10m",
                        _milli(
                            'fleet_namespace_model:energy_per_token_joules:rate5m{namespace="llm"}'
                        ),
                        [
                            (f'{{cluster="east",namespace="llm",model_name="{QWEN}"}}', 3000),
                            (f'{{cluster="east",namespace="llm",model_name="{LLAMA}"}}', 2000),
                            (f'{{cluster="west",namespace="llm",model_name="{QWEN}"}}', 6000),
                            (f'{{cluster="west",namespace="llm",model_name="{LLAMA}"}}', 2000),
                        ],
                    ),
                    _expect(
                        "10m",
                        "round(fleet_cluster:gpu_power_watts:rate5m)",
                        [('{cluster="east"}', 1080), ('{cluster="west"}', 1380)],
                    ),
                    _expect(
                        "10m",
                        "fleet:electricity_price_usd_per_kwh",
                        [
                            ('fleet:electricity_price_usd_per_kwh{cluster="east"}', 0.12),
                            ('fleet:electricity_price_usd_per_kwh{cluster="west"}', 0.12),
                        ],
                    ),
                    _expect(
                        "10m",
                        "round(1e5 * fleet_cluster:cost_usd_per_hour:rate5m)",
                        [('{cluster="east"}', 14256), ('{cluster="west"}', 18216)],
                    ),
                ],
            }
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_fleet_rules_never_join_or_group_on_instance():
    """Federation: `instance` differs between the exporters that see one GPU or pod, and a
    global ruler sees several clusters; every join and grouping must name cluster and a
    GPU or pod identity instead."""
    groups = yaml.safe_load(FLEET_RULES.read_text())["groups"]
    for rule in (rule for group in groups for rule in group["rules"]):
        expr = rule["expr"]
        for clause in re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", expr):
            names = {name.strip() for name in clause.split(",") if name.strip()}
            assert "instance" not in names, (rule.get("record", rule.get("alert")), clause)
            if names:
                assert "cluster" in names, (rule.get("record", rule.get("alert")), clause)


def test_tariff_is_ecoguards_default_region():
    """The dollars and CO2 use the same price, intensity and PUE as ecoguard's `us` region."""
    from ecoguard.knowledge.tables import region

    grid = region("us")
    rules = {
        rule["record"]: rule["expr"]
        for group in yaml.safe_load(FLEET_RULES.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }

    def constant(record: str) -> float:
        return float(re.match(r"\s*([0-9.]+)\s*\+", rules[record]).group(1))

    assert constant("fleet:electricity_price_usd_per_kwh") == grid.price_usd_per_kwh
    assert constant("fleet:grid_intensity_gco2_per_kwh") == grid.gco2_per_kwh
    assert constant("fleet:power_usage_effectiveness:ratio") == grid.pue


def test_mig_gpu_counted_once_and_split_between_its_pods(tmp_path):
    """DCGM repeats a MIG GPU's device energy on each instance's series (GPU_I_ID), each
    attributed to the pod using that instance. The GPU counts once for its node; its power is
    split evenly between the two pods (DCGM has no per-instance energy)."""
    dcgm = dict(Hostname="node-m", instance="10.0.2.1:9400", job="dcgm")
    series = [
        _dcgm_energy(
            300,
            UUID="GPU-m0",
            GPU_I_ID="1",
            GPU_I_PROFILE="3g.40gb",
            namespace="team-a",
            pod="a-0",
            **dcgm,
        ),
        _dcgm_energy(
            300,
            UUID="GPU-m0",
            GPU_I_ID="2",
            GPU_I_PROFILE="3g.40gb",
            namespace="team-b",
            pod="b-0",
            **dcgm,
        ),
        _tokens("vllm:generation_tokens_total", 50, namespace="team-a", pod="a-0", model_name=QWEN),
        _tokens("vllm:generation_tokens_total", 30, namespace="team-b", pod="b-0", model_name=QWEN),
    ]
    result = _promtool(
        tmp_path,
        [
            {
                "interval": "15s",
                "input_series": series,
                "promql_expr_test": [
                    _expect(
                        "10m",
                        "round(fleet_node:gpu_power_watts:rate5m)",
                        [('{node="node-m"}', 300)],
                    ),
                    _expect(
                        "10m",
                        "round(fleet_namespace:gpu_power_watts:rate5m)",
                        [('{namespace="team-a"}', 150), ('{namespace="team-b"}', 150)],
                    ),
                    # 300 W / 80 tok/s over the GPU's two tenants.
                    _expect(
                        "10m",
                        _milli("fleet_model:energy_per_token_joules:rate5m"),
                        [(f'{{model_name="{QWEN}"}}', 3750)],
                    ),
                ],
            }
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_when_a_node_exporter_sees_no_gpu(tmp_path):
    target = dict(ecoguard_scope="node", namespace="ecoguard", job="ecoguard-exporter")
    series = [
        # node-a: samples and sees its GPU; node-b: samples but NVML lists nothing.
        {
            "series": "ecoguard_sampler_samples_total{"
            + _labels(node="node-a", pod="ecoguard-exporter-a", **target)
            + "}",
            "values": _counter(10),
        },
        _ecoguard_gpu("GPU-a0", 300, node="node-a", pod="ecoguard-exporter-a", **target),
        {
            "series": "ecoguard_sampler_samples_total{"
            + _labels(node="node-b", pod="ecoguard-exporter-b", **target)
            + "}",
            "values": _counter(10),
        },
    ]
    result = _promtool(
        tmp_path,
        [
            {
                "interval": "15s",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "11m",
                        "alertname": "EcoguardNodeExporterSeesNoGpu",
                        "exp_alerts": [
                            {
                                "exp_labels": {"node": "node-b", "severity": "warning"},
                                "exp_annotations": {
                                    "summary": "ecoguard's exporter on node node-b sees no GPU",
                                    "description": "The exporter samples but NVML lists no GPU "
                                    "in its container. Check that the NVIDIA runtime serves the "
                                    "pod (the nvidia-runtime-class component) and that it honours "
                                    "NVIDIA_VISIBLE_DEVICES for unprivileged containers.",
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr
