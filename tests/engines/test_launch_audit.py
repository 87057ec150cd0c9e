"""Launch files (shell, Dockerfile, docker-compose, Kubernetes) as audit inputs: the engine
arguments they pass -> the guard's rules, with the line of the flag that sets each trap."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from ecoguard.audit import audit_paths
from ecoguard.audit.launch import audit_launch_text
from ecoguard.cli import main
from ecoguard.deployment import GpuSpec
from ecoguard.engines.launch_files import find_commands, launch_kind

HERE = Path(__file__).resolve().parent
LAUNCH = HERE / "launch"
SARIF_SCHEMA = HERE.parent / "audit" / "sarif-2.1.0-subset.schema.json"


def _found(result) -> set[tuple[str, int | None, str]]:
    return {(Path(f.location.path).name, f.location.line, f.rule) for f in result.findings}


def test_realistic_launch_files_give_rule_ids_and_flag_lines():
    result = audit_paths([LAUNCH])
    assert not result.problems
    assert sorted(Path(p).name for p in result.files) == [
        "Dockerfile",
        "deployment.yaml",
        "docker-compose.yml",
        "serve.sh",
    ]
    assert _found(result) == {
        # serve.sh: AWQ on a 0.5B model (the --quantization line), --max-num-seqs 1 (its line);
        # the 8B server on the same script is healthy.
        ("serve.sh", 11, "small-model-quant"),
        ("serve.sh", 13, "batch-size-one"),
        # Dockerfile: CMD arguments to the vllm-openai image's entrypoint, exec form over lines.
        ("Dockerfile", 10, "small-model-quant"),
        ("Dockerfile", 11, "batch-size-one"),
        # compose: TGI's --quantize bitsandbytes is LLM.int8() at threshold 6 on a 1.5B model.
        ("docker-compose.yml", 8, "int8-mixed"),
        ("docker-compose.yml", 8, "small-model-quant"),
        # Kubernetes: torchao float8 with --enforce-eager (args list) and an `sh -c` block.
        ("deployment.yaml", 30, "fp8-eager"),
        ("deployment.yaml", 41, "batch-size-one"),
    }
    engines = {dict(f.details)["engine"] for f in result.findings}
    assert engines == {"vllm", "tgi"}


def test_engine_wording_names_the_flag_not_python():
    result = audit_launch_text(
        "vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 1\n", "run.sh", GpuSpec()
    )
    (finding,) = result.findings
    assert finding.rule == "batch-size-one"
    assert "--max-num-seqs 1" in finding.message and "--max-num-seqs" in finding.fix
    assert "consecutive generate calls" not in finding.message


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        # docker run with options before the image
        (
            "docker run --gpus all -p 8000:8000 -e HF_TOKEN=$T vllm/vllm-openai:latest \\\n"
            "  --model Qwen/Qwen2.5-0.5B-Instruct --max-num-seqs=1\n",
            "shell",
            {(2, "batch-size-one")},
        ),
        # docker run with an explicit entrypoint: its arguments are not vLLM's
        (
            "docker run --entrypoint /bin/bash vllm/vllm-openai:latest --max-num-seqs 1\n",
            "shell",
            set(),
        ),
        # bash -c with the command inside a string, underscores in the flag
        (
            "bash -c 'vllm serve Qwen/Qwen2.5-0.5B-Instruct --max_num_seqs 1'\n",
            "shell",
            {(1, "batch-size-one")},
        ),
        # a commented-out command is no command
        ("# vllm serve Qwen/Qwen2.5-0.5B-Instruct --max-num-seqs 1\n", "shell", set()),
        # TGI 4-bit bitsandbytes on a 0.5B model
        (
            "text-generation-launcher --model-id Qwen/Qwen2.5-0.5B-Instruct "
            "--quantize bitsandbytes-nf4\n",
            "shell",
            {(1, "small-model-quant")},
        ),
        # llama.cpp's server with one slot
        (
            "llama-server -m /models/qwen2.5-7b-q8_0.gguf -np 1 --port 8080\n",
            "shell",
            {(1, "batch-size-one")},
        ),
        # SGLang with one running request
        (
            "python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct "
            "--max-running-requests 1\n",
            "shell",
            {(1, "batch-size-one")},
        ),
        # Dockerfile: exec ENTRYPOINT + CMD arguments
        (
            'FROM python:3.11\nENTRYPOINT ["vllm", "serve"]\nCMD ["Qwen/Qwen2.5-0.5B-Instruct-AWQ"]\n',
            "dockerfile",
            {(3, "small-model-quant")},
        ),
        # Dockerfile: shell-form CMD over continuation lines
        (
            "FROM python:3.11\nCMD vllm serve Qwen/Qwen2.5-7B-Instruct \\\n    --max-num-seqs 1\n",
            "dockerfile",
            {(3, "batch-size-one")},
        ),
        # compose: entrypoint list + command list
        (
            "services:\n  llm:\n    image: my/vllm\n    entrypoint: [python3, -m, "
            "vllm.entrypoints.openai.api_server]\n    command:\n      - --model\n"
            "      - Qwen/Qwen2.5-7B-Instruct\n      - --max-num-seqs\n      - '1'\n",
            "yaml",
            {(8, "batch-size-one")},
        ),
        # bitsandbytes 8-bit checkpoint config given through --hf-overrides, threshold 0: no trap
        (
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --quantization bitsandbytes "
            '--hf-overrides \'{"quantization_config": {"load_in_8bit": true, '
            '"llm_int8_threshold": 0.0}}\'\n',
            "shell",
            set(),
        ),
        # ... and at 6.0: int8-mixed
        (
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --quantization bitsandbytes "
            '--hf-overrides \'{"quantization_config": {"load_in_8bit": true, '
            '"llm_int8_threshold": 6.0}}\'\n',
            "shell",
            {(1, "int8-mixed")},
        ),
        # vLLM's own FP8 kernels are not torchao's eager path, even with --enforce-eager
        (
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --quantization fp8 --enforce-eager\n",
            "shell",
            set(),
        ),
        # torchao float8 without --enforce-eager: vLLM compiles it
        (
            "vllm serve Qwen/Qwen2.5-7B-Instruct --quantization torchao "
            '--hf-overrides \'{"quantization_config": {"quant_type": "float8_weight_only"}}\'\n',
            "shell",
            set(),
        ),
    ],
)
def test_engine_commands(text, kind, expected):
    result = audit_launch_text(
        text, {"shell": "x.sh", "dockerfile": "Dockerfile", "yaml": "x.yaml"}[kind], GpuSpec()
    )
    assert not result.problems
    assert {(f.location.line, f.rule) for f in result.findings} == expected


def test_helm_template_is_skipped_with_advice_and_bad_yaml_is_an_error(tmp_path):
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "deployment.yaml").write_text(
        "spec:\n  containers:\n    - image: vllm/vllm-openai\n      args:\n"
        "        {{- toYaml .Values.vllm.args | nindent 8 }}\n"
    )
    (chart / "broken.yaml").write_text("services:\n  vllm:\n    command: [vllm, serve\n")
    result = audit_paths([chart])
    kinds = {(Path(p.path).name, p.kind) for p in result.problems}
    assert kinds == {("deployment.yaml", "template"), ("broken.yaml", "syntax-error")}
    assert [Path(p.path).name for p in result.errors] == ["broken.yaml"]
    assert "helm template" in next(p.message for p in result.skipped)
    assert result.exit_code() == 2


def test_yaml_without_engine_is_not_parsed(tmp_path):
    # Invalid YAML, but it mentions no engine: never read as a launch file.
    (tmp_path / "ci.yml").write_text("on: [push\n")
    result = audit_paths([tmp_path])
    assert not result.problems and not result.findings


def test_launch_kind():
    assert launch_kind("deploy/Dockerfile") == "dockerfile"
    assert launch_kind("Dockerfile.cpu") == "dockerfile"
    assert launch_kind("serve.dockerfile") == "dockerfile"
    assert launch_kind("k8s/vllm.yaml") == "yaml"
    assert launch_kind("run.sh") == "shell"
    assert launch_kind("serve.py") is None
    with pytest.raises(ValueError, match="accepted: shell, dockerfile, yaml"):
        find_commands("vllm serve x", "toml")


def test_sarif_for_launch_files_is_valid(tmp_path, capsys):
    out = tmp_path / "audit.sarif"
    assert main(["audit", str(LAUNCH), "--format", "sarif", "-o", str(out)]) == 1
    log = json.loads(out.read_text())
    jsonschema.validate(log, json.loads(SARIF_SCHEMA.read_text()))
    results = log["runs"][0]["results"]
    located = {
        (
            Path(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]).name,
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
            r["ruleId"],
        )
        for r in results
    }
    assert ("deployment.yaml", 30, "fp8-eager") in located
    assert ("serve.sh", 13, "batch-size-one") in located
    assert len(results) == 8


def test_yaml_without_pyyaml_is_skipped_with_the_extra_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml -> ImportError
    result = audit_launch_text(
        "services:\n  llm:\n    image: vllm/vllm-openai\n    command: --max-num-seqs 1\n",
        "compose.yaml",
        GpuSpec(),
    )
    (problem,) = result.problems
    assert problem.kind == "needs-dependency" and not problem.is_error
    assert "pip install" in problem.message and "[launch]" in problem.message


def test_python_llm_and_launch_file_share_the_engine_mapping():
    """The same vLLM arguments in an offline LLM(...) script and in a launch file reach the
    same rules (one mapping: ecoguard.engines.engine_args)."""
    from ecoguard.audit import audit_source

    python = audit_source(
        "from vllm import LLM\n"
        'llm = LLM(model="Qwen/Qwen2.5-0.5B-Instruct-AWQ", quantization="awq", dtype="half")\n',
        "offline.py",
    )
    shell = audit_launch_text(
        "vllm serve Qwen/Qwen2.5-0.5B-Instruct-AWQ --quantization awq --dtype half\n",
        "serve.sh",
        GpuSpec(),
    )
    assert [f.rule for f in python.findings if f.location.line == 2] == ["small-model-quant"]
    assert [f.rule for f in shell.findings] == ["small-model-quant"]
    details = [dict(result.findings[0].details) for result in (python, shell)]
    assert (
        details[0]["judged_as"]
        == details[1]["judged_as"]
        == ("nf4: the measured 4-bit weight-only format")
    )
    assert details[0]["threshold_b"] == details[1]["threshold_b"]


def test_yaml_alias_bomb_and_deep_nesting_do_not_stall_or_crash_the_audit(tmp_path):
    bomb = "a: &a [" + ",".join(['"vllm"'] * 9) + "]\n"
    previous = "a"
    for name in "bcdefghij":  # 9**10 paths through shared nodes
        bomb += f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]\n"
        previous = name
    bomb += "svc:\n  command: vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 1\n"
    (tmp_path / "bomb.yaml").write_text(bomb)
    (tmp_path / "deep.yaml").write_text("vllm: " + "[" * 3000 + "]" * 3000 + "\n")
    result = audit_paths([tmp_path])
    assert [(Path(f.location.path).name, f.location.line, f.rule) for f in result.findings] == [
        ("bomb.yaml", 12, "batch-size-one")
    ]
    (problem,) = result.problems
    assert (Path(problem.path).name, problem.kind) == ("deep.yaml", "syntax-error")
    assert "too deep" in problem.message


def test_unbalanced_quotes_skip_that_command_only():
    text = "echo 'unterminated\nvllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 1\n"
    result = audit_launch_text(text, "run.sh", GpuSpec())
    assert [(f.location.line, f.rule) for f in result.findings] == [(2, "batch-size-one")]


def test_gguf_is_not_judged_by_dequantizing_formats_crossovers():
    result = audit_launch_text(
        "llama-server -m /models/qwen2.5-0.5b-instruct-q4_k_m.gguf --port 8080\n",
        "llama.sh",
        GpuSpec(),
    )
    assert result.findings == []
