"""Launch files as audit inputs: shell scripts, Dockerfiles, docker-compose and Kubernetes
YAML that start a serving engine (vLLM, TGI, SGLang, llama.cpp).

The engine commands are found by ``ecoguard.engines.launch_files`` and judged by
``ecoguard.engines.engine_args`` (the module the vLLM plugin uses too), so findings carry the
same rule ids as the Python audit and the live guard, with the line of the flag that sets
the trap.
"""

from __future__ import annotations

from ecoguard.audit.result import AuditResult, FileProblem
from ecoguard.deployment import GpuSpec
from ecoguard.engines.engine_args import engine_deployment, engine_findings, resolve_model_spec
from ecoguard.engines.launch_files import LaunchCommand, LaunchFileError, find_commands, launch_kind
from ecoguard.findings import Finding, Location

# The engine setting each rule's finding should point at (the first one the command sets).
_ANCHORS: dict[str, tuple[str, ...]] = {
    "batch-size-one": ("max_num_seqs",),
    "small-model-quant": ("quantization", "model"),
    "int8-mixed": ("quantization", "model"),
    "fp8-eager": ("enforce_eager", "quantization", "model"),
    "bf16-unsupported": ("dtype", "model"),
    "vram-overflow": ("model",),
}

__all__ = ["audit_launch_text", "is_launch_file", "launch_kind"]


def is_launch_file(name: str) -> bool:
    """Whether ``name`` is read as a launch file (``.sh``, ``Dockerfile``, ``.yaml``...)."""
    return launch_kind(name) is not None


def audit_launch_text(
    text: str, filename: str, gpu: GpuSpec, *, kind: str | None = None
) -> AuditResult:
    """Audit one launch file's text. ``kind`` (``shell``, ``dockerfile``, ``yaml``) defaults to
    what the file name says. A YAML syntax error is a problem of the file, not an exception;
    an unrendered Helm template is skipped with a note to render it first."""
    result = AuditResult(files=[filename])
    kind = kind or launch_kind(filename)
    if kind is None:
        raise ValueError(f"{filename}: not a launch file (shell script, Dockerfile or YAML)")
    try:
        commands = find_commands(text, kind)
    except (LaunchFileError, RecursionError, ValueError) as exc:
        if not isinstance(exc, LaunchFileError):
            exc = LaunchFileError(f"could not read as {kind}: {type(exc).__name__}: {exc}")
        if "{{" in text:
            result.problems.append(
                FileProblem(
                    filename,
                    "template",
                    "a Helm/Go template, not YAML: audit its rendered output "
                    "(helm template ... > rendered.yaml)",
                )
            )
        elif "PyYAML" in str(exc):
            result.problems.append(FileProblem(filename, "needs-dependency", str(exc)))
        else:
            result.problems.append(FileProblem(filename, exc.kind, str(exc), exc.line))
        return result
    for command in commands:
        facts = engine_deployment(command.config, gpu=gpu, resolve_model=resolve_model_spec)
        for finding in engine_findings(facts):
            result.findings.append(_placed(finding, command, filename))
    return result.sort()


def _placed(finding: Finding, command: LaunchCommand, filename: str) -> Finding:
    line = command.line
    for field_name in _ANCHORS.get(finding.rule, ()):
        if field_name in command.config.positions:
            line = command.line_of(field_name)
            break
    return finding.at(Location(filename, line))
