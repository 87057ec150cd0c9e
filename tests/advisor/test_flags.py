"""The deployment facts given as flags: the advisor CLI and the MCP tools build one
DeploymentArguments and get the same answer as answer_for_flags with the same facts."""

from __future__ import annotations

import argparse
import json

import pytest

from ecoguard.advisor.answers import answer_for_flags
from ecoguard.advisor.flags import DeploymentArguments
from ecoguard.cli import main
from ecoguard.config import Settings


def test_from_namespace_takes_the_fields_flags_fill_and_the_ones_named_otherwise() -> None:
    args = argparse.Namespace(model="7B", gpu="a800", json=True, plain=False, throughput=10.0)
    facts = DeploymentArguments.from_namespace(args, observed_throughput_tok_s=args.throughput)
    assert facts == DeploymentArguments(model="7B", gpu="a800", observed_throughput_tok_s=10.0)
    with pytest.raises(TypeError):
        DeploymentArguments.from_namespace(args, throughput=10.0)


def test_cli_region_and_every_observed_flag_reach_the_answer(capsys) -> None:
    argv = ["diagnose", "--model", "Mistral-7B", "--gpu", "a800", "--throughput", "10"]
    argv += ["--power", "300", "--energy-per-1k", "9000", "--region", "cn", "--json"]
    assert main(argv) == 0
    cli = json.loads(capsys.readouterr().out)
    lib = answer_for_flags(
        "diagnose",
        model="Mistral-7B",
        gpu="a800",
        settings=Settings.from_env().with_(region="china"),
        observed={"throughput_tok_s": 10.0, "power_w": 300.0, "energy_j_per_1k": 9000.0},
    )
    assert cli == json.loads(json.dumps(lib.to_dict(), default=str))
    assert cli["settings"]["region"] == "china"
