"""What the advisor's renderer relies on after its shapes were made one (issue 28): the CLI
flags are Question.from_flags' own keywords, the side-by-side table is one record of cells per
configuration, amounts read through one money format, and a diagnosis's evidence rows come
already chosen for the asked-about GPU."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

from ecoguard.advisor import cli
from ecoguard.advisor.answers import advise, answer
from ecoguard.advisor.question import Question
from ecoguard.advisor.rendering import render
from ecoguard.config import Settings

_OUTPUT_FLAGS = {"help", "json", "plain", "format"}


def _flags_parsers() -> dict[str, argparse.ArgumentParser]:
    sub = argparse.ArgumentParser().add_subparsers()
    cli.register(sub)
    return {name: sub.choices[name] for name in ("optimize", "compare", "diagnose")}


def test_every_fact_flag_is_a_keyword_the_question_reads() -> None:
    # A flag whose name is not a from_flags keyword (nor a listed renamed one) would be
    # dropped without a word by question_from_args.
    keywords = set(inspect.signature(Question.from_flags).parameters) - {"protocol"}
    for name, parser in _flags_parsers().items():
        dests = {action.dest for action in parser._actions} - _OUTPUT_FLAGS
        unread = dests - keywords - set(cli._RENAMED_FLAGS)
        assert not unread, f"{name}: flags no Question keyword reads: {sorted(unread)}"


def test_the_parsed_flags_make_the_question_the_keywords_make() -> None:
    flags = {
        "--model": "Mistral-7B",
        "--gpu": "a800",
        "--precision": "int8",
        "--batch-size": "4",
        "--prompt-tokens": "300",
        "--generation-tokens": "100",
        "--requests-per-month": "5000",
        "--region": "eu",
        "--gpu-count": "2",
        "--engine": "vllm",
        "--language": "zh",
        "--throughput": "37",
        "--power": "163",
        "--energy-per-1k": "4400",
    }
    argv = [part for flag in flags.items() for part in flag]
    args = _flags_parsers()["diagnose"].parse_args(argv)
    assert cli.question_from_args(args, "diagnose") == Question.from_flags(
        "diagnose",
        model="Mistral-7B",
        gpu="a800",
        precision="int8",
        batch_size=4,
        prompt_tokens=300,
        generation_tokens=100,
        requests_per_month=5000,
        region="eu",
        gpu_count=2,
        engine="vllm",
        language="zh",
        observed_throughput_tok_s=37.0,
        observed_power_w=163.0,
        observed_energy_j_per_1k=4400.0,
    )


def _table(text: str) -> list[list[str]]:
    """The Markdown side-by-side table's body rows, as cells."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]]


def test_a_configuration_without_figures_is_a_column_of_dashes_in_row_order() -> None:
    full = advise("Mistral-7B on A800, 1M requests a month, cost?", settings=Settings())
    money = full.result.money or {}
    result = dataclasses.replace(
        full.result, optimized=None, recommendation=None, money={"current": money["current"]}
    )
    rows = _table(render(dataclasses.replace(full, result=result), fmt="md"))
    assert [r[0] for r in rows] == [
        "J/1k tok",
        "J/request",
        "tok/s",
        "W",
        "VRAM GB",
        "requests/month",
        "kWh/month",
        "cost/month",
        "cost/year",
        "kg CO2/month",
        "tier",
    ]
    assert all(r[2] == "-" for r in rows) and all(r[1] != "-" for r in rows[:2])


def test_a_month_a_year_and_the_saving_read_in_the_currency_asked() -> None:
    got = advise("Qwen2.5-7B on A800, 1M requests a month, cost in CNY rate 7.2?")
    money = got.result.money or {}
    now = money["current"]
    rows = {r[0]: r for r in _table(render(got, fmt="md"))}
    assert rows["cost/month"][1] == f"¥{now['cost_cny']:,.2f} (${now['cost_usd']:,.2f})"
    year = f"¥{now['cost_cny'] * 12:,.2f} (${now['cost_usd'] * 12:,.2f})"
    assert rows["cost/year"][1] == year
    saving = f"Saving: ¥{money['saving_cny']:,.2f} (${money['saving_usd']:,.2f}) per month"
    assert saving in render(got, fmt="text")


def test_a_local_currency_saving_shows_no_dollars() -> None:
    got = advise("Qwen2.5-7B on A800 at 0.25 EUR/kWh, 1M requests a month, cost?")
    money = got.result.money or {}
    text = render(got, fmt="text")
    assert f"Saving: €{money['saving_local']:,.2f} per month" in text
    assert "Saving: $" not in text


def test_a_diagnosis_explains_a_trap_from_the_asked_gpus_rows_when_it_has_any() -> None:
    # The renderer shows these rows as they come: it no longer picks the GPU's own out of them.
    on_gpu = 0
    for gpu in ("rtx5090", "a800", "rtx4090d", "t4", "h100", "a100"):
        for precision in ("int8_mixed", "nf4", "fp8"):
            question = Question.from_flags(
                "diagnose", model="Qwen2.5-0.5B", gpu=gpu, precision=precision, batch_size=1
            )
            got = answer(question, Settings())
            profile = got.result.deployment.gpu.profile
            for item in got.result.extra.get("explained", []):
                evidence = item["evidence"]
                trap_gpus = {e.get("gpu") for e in evidence if e.get("precision") != "fp16"}
                if profile in trap_gpus:
                    on_gpu += 1
                    assert trap_gpus == {profile}, (gpu, precision, item["rule"], trap_gpus)
    assert on_gpu >= 3  # the check above ran on traps with rows on the asked GPU
