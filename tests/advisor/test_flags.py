"""The facts given as flags: the advisor CLI and the MCP tools make one Question (the record free
text makes too) and ask the one assembly path, ``answers.answer``."""

from __future__ import annotations

import argparse
import json

import pytest

from ecoguard.advisor.answers import answer
from ecoguard.advisor.cli import question_from_args
from ecoguard.advisor.question import Question
from ecoguard.cli import main
from ecoguard.config import Settings
from ecoguard.errors import UsageError


def test_the_cli_flags_fill_the_question_under_its_own_names() -> None:
    args = argparse.Namespace(
        model="7B", gpu="a800", json=True, plain=False, throughput=10.0, region="", language="en"
    )
    question = question_from_args(args, "diagnose")
    assert question == Question.from_flags(
        "diagnose", model="7B", gpu="a800", observed_throughput_tok_s=10.0
    )
    assert question.region is None  # an empty --region keeps the configured one


def test_from_flags_reads_the_facts_as_a_question_in_words_would() -> None:
    # A volume with no use stated is a service from many users (as "1M requests a month" is).
    served = Question.from_flags("optimize", model="7B", requests_per_month=1_000_000)
    assert (served.use, served.serving) == ("api", True)
    assert Question.from_flags("optimize", model="7B", use="chat").serving is False
    assert Question.from_flags("optimize", model="7B", use="chat", requests_per_month=5).serving
    assert Question.from_flags("estimate", model="7B", use="batch", requests_per_month=5).use == (
        "batch"
    )
    priced = Question.from_flags("estimate", model="7B", price_usd_per_kwh=0.2, cny_per_usd=7.2)
    assert (priced.price_per_kwh, priced.price_currency, priced.currency) == (0.2, "USD", "CNY")
    assert Question.from_flags("compare", model="7B", precision="4bit").precisions == ("nf4",)
    assert Question.from_flags("compare", model="7B", region="cn").region == "china"


@pytest.mark.parametrize(
    ("protocol", "facts"),
    [
        ("audit", {}),
        ("optimise", {}),
        ("optimize", {"region": "mars"}),
        ("optimize", {"language": "fr"}),
        ("optimize", {"precision": "fp7"}),
    ],
)
def test_from_flags_refuses_what_no_door_accepts(protocol, facts) -> None:
    with pytest.raises(UsageError):
        Question.from_flags(protocol, model="7B", **facts)


def test_cli_region_and_every_observed_flag_reach_the_answer(capsys) -> None:
    argv = ["diagnose", "--model", "Mistral-7B", "--gpu", "a800", "--throughput", "10"]
    argv += ["--power", "300", "--energy-per-1k", "9000", "--region", "cn", "--json"]
    assert main(argv) == 0
    cli = json.loads(capsys.readouterr().out)
    flags = Question.from_flags(
        "diagnose",
        model="Mistral-7B",
        gpu="a800",
        region="cn",
        observed_throughput_tok_s=10.0,
        observed_power_w=300.0,
        observed_energy_j_per_1k=9000.0,
    )
    lib = answer(flags, Settings.from_env())
    assert cli == json.loads(json.dumps(lib.to_dict(), default=str))
    assert cli["settings"]["region"] == "china"


def test_the_region_is_a_listed_default_in_every_door_and_language() -> None:
    """Issue 28: the region the figures are priced on is listed with how to change it, in
    English too (it was listed only for a question in Chinese)."""

    def region_default(question: Question, settings: Settings | None = None) -> object:
        listed = {d.field: d.value for d in answer(question, settings).defaults}
        return listed.get("region")

    assert region_default(Question.from_flags("optimize", model="7B", gpu="a800")) == "us"
    zh = Question.from_flags("optimize", model="7B", gpu="a800", language="zh")
    assert region_default(zh) == "china"
    named = Question.from_flags("optimize", model="7B", gpu="a800", region="eu")
    assert region_default(named) is None
    configured = Settings(region="eu")  # ECOGUARD_REGION: the configuration names it
    assert region_default(Question.from_flags("optimize", model="7B"), configured) is None
