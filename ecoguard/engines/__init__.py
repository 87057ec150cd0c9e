"""Serving engines as front doors: vLLM, TGI, SGLang and llama.cpp.

``command_line`` reads engine command lines (which engine, what its flags set); ``engine_args``
maps an engine configuration to the Deployment record and the guard's rules (shared by the
launch-file audit and the vLLM plugin); ``launch_files`` finds engine command lines in shell
scripts, Dockerfiles, docker-compose files and Kubernetes manifests; ``vllm_plugin`` is the
plugin vLLM loads from its entry points when ``ECOGUARD_VLLM=1``.
"""

from __future__ import annotations

from ecoguard.engines.command_line import (
    ENGINES,
    EngineConfig,
    detect_engine,
    parse_args,
    parse_command,
)
from ecoguard.engines.engine_args import EngineFacts, engine_deployment, engine_findings

__all__ = [
    "ENGINES",
    "EngineConfig",
    "EngineFacts",
    "detect_engine",
    "engine_deployment",
    "engine_findings",
    "parse_args",
    "parse_command",
]
