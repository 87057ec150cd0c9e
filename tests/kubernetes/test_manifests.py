"""The kustomize base and its variants (deploy/kubernetes): generated parts current, renders
valid against the Kubernetes schemas (offline) and the Prometheus Operator kinds, rules that
promtool accepts, and a container whose command, port and probes match what `ecoguard exporter`
really serves."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from ecoguard import __version__  # noqa: E402
from ecoguard.cli import build_parser  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "kubernetes"
sys.path.insert(0, str(REPO / "tools"))
import render_kubernetes  # noqa: E402
from operator_schemas import SCHEMAS  # noqa: E402

KUBE_VERSIONS = ("1.25", "1.37")  # the oldest and newest schemas kubernetes-validate ships
SAMPLER_KINDS = {"DaemonSet", "Service", "ServiceMonitor", "ServiceAccount", "NetworkPolicy"}


# --------------------------------------------------------------------------- rendering


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip(
            "kubectl not found: the manifests render with `kubectl kustomize` (kubectl >= 1.27)"
        )
    return kubectl


def _kustomize(path: Path) -> list[dict]:
    result = subprocess.run(
        [_kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [obj for obj in yaml.safe_load_all(result.stdout) if obj]


@pytest.fixture(scope="module")
def base() -> list[dict]:
    return _kustomize(DEPLOY)


@pytest.fixture(scope="module")
def dcgm() -> list[dict]:
    return _kustomize(DEPLOY / "overlays" / "dcgm-exporter")


@pytest.fixture(scope="module")
def runtime_class(tmp_path_factory) -> list[dict]:
    """The base with the nvidia-runtime-class component, as a user's overlay would add it."""
    overlay = tmp_path_factory.mktemp("overlay")
    (overlay / "kustomization.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY, overlay)],
                "components": [
                    os.path.relpath(DEPLOY / "components" / "nvidia-runtime-class", overlay)
                ],
            }
        )
    )
    return _kustomize(overlay)


def _one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in found])
    return found[0]


# --------------------------------------------------------------------------- generated parts


def test_generated_manifests_are_current():
    """generated/ is exactly what tools/render_kubernetes.py writes from grafana/: a rule or a
    dashboard changed without rerunning the script fails here."""
    rendered = render_kubernetes.render()
    assert rendered == render_kubernetes.render()  # deterministic
    for path, content in rendered.items():
        assert path.exists(), f"{path} missing: run tools/render_kubernetes.py"
        assert path.read_bytes() == content.encode("utf-8"), (
            f"{path.relative_to(REPO)} is stale: run tools/render_kubernetes.py"
        )


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(render_kubernetes, "OUT_DIR", tmp_path)
    assert render_kubernetes.main(["--check"]) == 1
    assert "is stale" in capsys.readouterr().err
    assert render_kubernetes.main([]) == 0
    assert render_kubernetes.main(["--check"]) == 0


def test_every_rule_file_and_dashboard_is_carried_unchanged(base):
    """After kustomize, each PrometheusRule's groups are its source file's groups, and each
    dashboard ConfigMap holds its JSON file's exact text, labelled for Grafana's sidecar."""
    rule_files = sorted((REPO / "grafana" / "prometheus").glob("*.yml"))
    assert len(rule_files) >= 4  # recording, alerts, engines, fleet
    for path in rule_files:
        rule = _one(base, "PrometheusRule", render_kubernetes._object_name(path))
        assert rule["spec"]["groups"] == yaml.safe_load(path.read_text())["groups"]
        assert rule["metadata"]["namespace"] == "ecoguard"
    for path in sorted((REPO / "grafana" / "dashboards").glob("*.json")):
        config_map = _one(base, "ConfigMap", f"{render_kubernetes._object_name(path)}-dashboard")
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["data"] == {path.name: path.read_text()}
        json.loads(config_map["data"][path.name])


def test_promtool_accepts_every_prometheus_rule(base, tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool binary not found (apt-get install prometheus)")
    files = []
    for rule in (o for o in base if o["kind"] == "PrometheusRule"):
        path = tmp_path / f"{rule['metadata']['name']}.yml"
        path.write_text(yaml.safe_dump(rule["spec"]))
        files.append(str(path))
    result = subprocess.run(
        [promtool, "check", "rules", *files], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------- schemas


def _kubernetes_validate():
    return pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate not installed (pip install -e '.[test]')",
    )


def _validate_all(objects: list[dict]) -> list[str]:
    """Every object against Kubernetes' schemas (strict: unknown fields fail) or the operator
    kinds' structural schemas; the list of what was checked, by kind."""
    import jsonschema

    validate = _kubernetes_validate().validate
    checked = []
    for obj in objects:
        if obj["kind"] in SCHEMAS:
            jsonschema.validate(obj, SCHEMAS[obj["kind"]])
        else:
            for version in KUBE_VERSIONS:
                validate(obj, version, strict=True)
        checked.append(obj["kind"])
    return sorted(checked)


def test_base_validates_offline(base, monkeypatch):
    """No network: kubernetes-validate must read the schemas it ships, never fetch one."""

    def no_network(*args, **kwargs):
        raise AssertionError("kubernetes-validate tried to reach the network")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    assert _validate_all(base) == sorted(
        ["Namespace", "ServiceAccount", "DaemonSet", "Service", "ServiceMonitor", "ConfigMap"]
        + ["NetworkPolicy"]
        + ["PrometheusRule"] * len(list((REPO / "grafana" / "prometheus").glob("*.yml")))
    )


def test_dcgm_overlay_runs_no_sampler_and_keeps_rules_and_dashboard(base, dcgm):
    assert _validate_all(dcgm)
    kinds = {o["kind"] for o in dcgm}
    assert not kinds & SAMPLER_KINDS
    rules = {o["metadata"]["name"] for o in dcgm if o["kind"] == "PrometheusRule"}
    assert rules == {o["metadata"]["name"] for o in base if o["kind"] == "PrometheusRule"}
    assert "ecoguard-fleet-rules" in rules
    fleet = json.dumps(_one(dcgm, "PrometheusRule", "ecoguard-fleet-rules")["spec"])
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in fleet
    assert "DCGM_FI_DEV_POWER_USAGE" in fleet
    assert any(o["kind"] == "ConfigMap" for o in dcgm)


def test_runtime_class_component(base, runtime_class):
    assert _validate_all(runtime_class)
    spec = _one(runtime_class, "DaemonSet")["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in _one(base, "DaemonSet")["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("kind", "mutate", "message"),
    [
        (
            "ServiceMonitor",
            lambda o: o["spec"]["endpoints"][0].update(relabellings=[]),
            "Additional properties",
        ),
        (
            "ServiceMonitor",
            lambda o: o["spec"]["endpoints"][0].update(interval="15 seconds"),
            "does not match",
        ),
        (
            "ServiceMonitor",
            lambda o: o["spec"]["endpoints"][0]["relabelings"][0].update(action="rename"),
            "is not one of",
        ),
        (
            "PrometheusRule",
            lambda o: o["spec"]["groups"][0]["rules"][0].update(record="x", alert="y"),
            "is valid under each of",
        ),
        (
            "PrometheusRule",
            lambda o: o["spec"]["groups"][0]["rules"][0].pop("expr"),
            "'expr' is a required property",
        ),
    ],
)
def test_operator_schemas_refuse_what_the_api_server_would(base, kind, mutate, message):
    """The hand-written structural schemas must be able to fail."""
    import jsonschema

    obj = json.loads(
        json.dumps(
            _one(base, kind) if kind != "PrometheusRule" else _one(base, kind, "ecoguard-alerts")
        )
    )
    jsonschema.validate(obj, SCHEMAS[kind])
    mutate(obj)
    with pytest.raises(jsonschema.ValidationError, match=message):
        jsonschema.validate(obj, SCHEMAS[kind])


def test_kubernetes_schemas_refuse_an_unknown_field(base):
    validate = _kubernetes_validate().validate
    import kubernetes_validate.utils as kv

    daemonset = json.loads(json.dumps(_one(base, "DaemonSet")))
    daemonset["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kv.ValidationError):
        validate(daemonset, KUBE_VERSIONS[-1], strict=True)


# --------------------------------------------------------------------------- the exporter


def _container(objects: list[dict]) -> dict:
    containers = _one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _expand(argument: str, env: dict[str, str]) -> str:
    # Kubernetes' $(VAR) expansion of command arguments.
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], argument)


def test_daemonset_runs_on_gpu_nodes_locked_down(base):
    pod = _one(base, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = _container(base)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory"}
    # The image tag is the package version, so an upgrade is a version bump in one place.
    assert container["image"].rsplit(":", 1)[1] == __version__


def test_network_policy_admits_only_the_prometheus_namespace_on_the_metrics_port(base):
    """/metrics names models, paths and GPU UUIDs with no authentication (issue 29: any pod
    could scrape or exhaust it): the exporter pods take ingress only from the monitoring
    namespace, on the container's metrics port, and nothing else."""
    policy = _one(base, "NetworkPolicy", "ecoguard-exporter")
    assert policy["metadata"]["namespace"] == "ecoguard"
    spec = policy["spec"]
    pod_labels = _one(base, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert spec["podSelector"]["matchLabels"]  # never {} (every pod of the namespace)
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    ports = {p["name"]: p for p in _container(base)["ports"]}
    assert rule["ports"] == [{"port": "metrics", "protocol": ports["metrics"]["protocol"]}]


def test_command_port_and_probes_match_what_the_exporter_serves(base, tmp_path):
    """Parse the container's command with ecoguard's own parser, then run it (the simulated
    backend standing in for NVML, loopback for the pod IP, a free port) and call the probes'
    path: the exporter must answer it with its metrics."""
    container = _container(base)
    command = container["command"]
    assert command[:2] == ["ecoguard", "exporter"]
    env_sources = {item["name"]: item for item in container["env"]}
    assert env_sources["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    args = build_parser("exporter").parse_args(
        [_expand(a, {"POD_IP": "10.1.2.3"}) for a in command[1:]]
    )
    assert args.addr == "10.1.2.3"
    assert args.backend == "nvml"
    (port,) = container["ports"]
    assert port["containerPort"] == args.port
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == port["name"]
    paths = {container[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")}

    # The Service and the ServiceMonitor reach the same port and path.
    service = _one(base, "Service")
    assert service["spec"]["clusterIP"] == "None"
    template_labels = _one(base, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= template_labels.items()
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] == port["name"]
    monitor = _one(base, "ServiceMonitor")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service_port["name"]
    paths.add(endpoint["path"])
    assert len(paths) == 1

    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    env.update({k: v["value"] for k, v in env_sources.items() if "value" in v})
    env["HOME"] = str(tmp_path)
    argv = [_expand(a, {"POD_IP": "127.0.0.1"}) for a in command[2:]]
    argv[argv.index("--port") + 1] = "0"
    argv[argv.index("--backend") + 1] = "simulated"
    process = subprocess.Popen(
        [sys.executable, "-m", "ecoguard", "exporter", *argv],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        url = None
        for line in process.stderr:
            found = re.search(r"serving (http://\S+)", line)
            if found:
                url = found.group(1)
                break
        assert url is not None, "the exporter did not start"
        root = url.rsplit("/", 1)[0]
        with urllib.request.urlopen(root + paths.pop(), timeout=10) as response:
            assert response.status == 200
            body = response.read().decode()
        assert "ecoguard_gpu_energy_joules_total{" in body
        assert 'tier="simulated"' in body
        with pytest.raises(urllib.error.HTTPError) as missing:  # the path matters
            urllib.request.urlopen(root + "/healthz", timeout=10)
        assert missing.value.code == 404
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    assert process.returncode == 0


def test_service_monitor_adds_the_labels_the_fleet_rules_join_on(base):
    fleet = (REPO / "grafana" / "prometheus" / "ecoguard-fleet-rules.yml").read_text()
    (endpoint,) = _one(base, "ServiceMonitor")["spec"]["endpoints"]
    relabel = {r["targetLabel"]: r for r in endpoint["relabelings"]}
    assert relabel["node"]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
    assert relabel["ecoguard_scope"]["replacement"] == "node"
    assert 'ecoguard_scope="node"' in fleet and 'ecoguard_scope!="node"' in fleet
