"""One question, one answer, whichever door it comes through (issue 28).

Each case is asked three ways: as free text (``advise``, English or Chinese), as the CLI
flags command of the same name (``ecoguard.cli.main`` run in-process, ``--json``) and as the MCP
tool of the same name (the tool function, called as the server calls it). The three answers
must agree on the protocol, the mood, the recommended precision and batch size, and every
monthly figure; in fact the whole answer but the text door's ``parsed`` section is the same.

``ecoguard estimate`` is the estimator's own command (``ecoguard.knowledge.cli``: the figures of
one configuration, no mood or recommendation): for estimate cases its monthly figures must be
the advisor's figures for the configuration asked about.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from ecoguard.advisor.answers import advise
from ecoguard.cli import main
from ecoguard.config import Settings
from ecoguard.mcp import tools
from ecoguard.mcp.tools import TOOLS

# The CLI flag of each fact a case may state (the others have no flag of their own).
FLAG_NAMES = {
    "model": "--model",
    "gpu": "--gpu",
    "precision": "--precision",
    "batch_size": "--batch-size",
    "requests_per_month": "--requests-per-month",
    "use": "--use",
    "region": "--region",
    "language": "--language",
    "observed_throughput_tok_s": "--throughput",
    "observed_power_w": "--power",
    "observed_energy_j_per_1k": "--energy-per-1k",
    "engine": "--engine",
    "gpu_count": "--gpu-count",
}


@dataclass(frozen=True)
class Case:
    protocol: str
    text: str
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.text


def _cases() -> list[Case]:
    models = ("Mistral-7B", "Qwen2.5-7B", "Qwen2.5-3B", "Yi-6B", "Llama-3-8B")
    gpus = (("A800", "a800"), ("RTX 5090", "rtx5090"), ("RTX 4090D", "rtx4090d"), ("H100", "h100"))
    cases: list[Case] = []
    for i, model in enumerate(models):
        shown, gpu = gpus[i % len(gpus)]
        other_shown, other = gpus[(i + 1) % len(gpus)]
        facts = {"model": model, "gpu": gpu}
        other_facts = {"model": model, "gpu": other}
        cases += [
            Case("optimize", f"What is the greenest config for {model} on {shown}?", facts),
            Case(
                "optimize",
                f"{model} 在 {shown} 上最省电的配置是什么？",
                {**facts, "language": "zh"},
            ),
            Case(
                "optimize",
                f"Greenest config for {model} on {other_shown} for a batch job",
                {**other_facts, "use": "batch"},
            ),
            Case(
                "optimize",
                f"Best config for {model} on {other_shown}, 3M requests a month",
                {**other_facts, "requests_per_month": 3_000_000},
            ),
            Case("compare", f"Compare all precisions for {model} on {shown}", facts),
            Case("compare", f"比较 {model} 在 {shown} 上的所有精度", {**facts, "language": "zh"}),
            Case(
                "compare",
                f"Compare all precisions for {model} on {other_shown}, 500k requests a month",
                {**other_facts, "requests_per_month": 500_000},
            ),
            Case(
                "estimate",
                f"What will {model} on {shown} with NF4 cost for 1 million requests a month?",
                {**facts, "precision": "nf4", "requests_per_month": 1_000_000},
            ),
            Case(
                "estimate",
                f"{model} 在 {shown} 上用 INT8，每月 200 万次请求要花多少钱？",
                {**facts, "precision": "int8", "requests_per_month": 2_000_000, "language": "zh"},
            ),
            Case(
                "estimate",
                f"{model} on {other_shown} at batch size 8, 1M requests a month, cost?",
                {**other_facts, "batch_size": 8, "requests_per_month": 1_000_000},
            ),
            Case(
                "diagnose",
                f"{model} on {shown} with load_in_8bit=True, I only get 10 tok/s",
                {**facts, "precision": "int8", "observed_throughput_tok_s": 10.0},
            ),
            Case(
                "diagnose",
                f"{model} 在 {shown} 上只有 12 tok/s，功耗 200 W，哪里不对？",
                {
                    **facts,
                    "observed_throughput_tok_s": 12.0,
                    "observed_power_w": 200.0,
                    "language": "zh",
                },
            ),
            Case(
                "diagnose",
                f"{model} on {other_shown} at batch size 1, 30 tok/s at 160 W, 3M requests a "
                "month: what is wrong?",
                {
                    **other_facts,
                    "batch_size": 1,
                    "observed_throughput_tok_s": 30.0,
                    "observed_power_w": 160.0,
                    "requests_per_month": 3_000_000,
                },
            ),
        ]
    return cases + _more_cases()


def _more_cases() -> list[Case]:
    """The issue's own three questions; use, region and GPUs outside the first loop."""
    return [
        Case(
            "optimize",
            "greenest config for Mistral-7B on RTX 4090D",
            {"model": "Mistral-7B", "gpu": "rtx4090d"},
        ),
        Case(
            "optimize",
            "greenest config for Qwen2.5-7B on A800",
            {"model": "Qwen2.5-7B", "gpu": "a800"},
        ),
        Case(
            "compare",
            "compare all precisions for Mistral-7B on A800",
            {"model": "Mistral-7B", "gpu": "a800"},
        ),
        Case(
            "optimize",
            "Mistral-7B chatbot on A800 for a single user, best config?",
            {"model": "Mistral-7B", "gpu": "a800", "use": "chat"},
        ),
        Case(
            "optimize",
            "Qwen2.5-7B API on A800 with batch size 16, best config?",
            {"model": "Qwen2.5-7B", "gpu": "a800", "use": "api", "batch_size": 16},
        ),
        Case(
            "estimate",
            "Qwen2.5-7B on T4 in the EU, 1M requests a month, cost?",
            {"model": "Qwen2.5-7B", "gpu": "t4", "region": "eu", "requests_per_month": 1_000_000},
        ),
        Case(
            "estimate",
            "Qwen2-1.5B 在 RTX 5090 上，每月 100 万次请求，美国电价，要多少钱？",
            {
                "model": "Qwen2-1.5B",
                "gpu": "rtx5090",
                "region": "us",
                "requests_per_month": 1_000_000,
                "language": "zh",
            },
        ),
        Case(
            "compare",
            "Compare all precisions for Qwen2.5-3B on an A100",
            {"model": "Qwen2.5-3B", "gpu": "a100"},
        ),
        # A serving engine and several GPUs are facts of the question at every door.
        Case(
            "optimize",
            "Greenest config for Qwen2.5-7B on H100 served by vLLM",
            {"model": "Qwen2.5-7B", "gpu": "h100", "engine": "vllm"},
        ),
        Case(
            "compare",
            "Compare all precisions for Qwen2.5-7B on H100 served by vLLM",
            {"model": "Qwen2.5-7B", "gpu": "h100", "engine": "vllm"},
        ),
        Case(
            "estimate",
            "Llama-3-70B on 4x A100 with tensor parallel, cost for 1M requests a month?",
            {
                "model": "Llama-3-70B",
                "gpu": "a100",
                "gpu_count": 4,
                "requests_per_month": 1_000_000,
            },
        ),
        Case(
            "optimize",
            "Greenest config for Mistral-7B on two A800s",
            {"model": "Mistral-7B", "gpu": "a800", "gpu_count": 2},
        ),
        Case(
            "compare",
            "比较 Qwen2.5-7B 在两张 A800 上的所有精度",
            {"model": "Qwen2.5-7B", "gpu": "a800", "gpu_count": 2, "language": "zh"},
        ),
        Case(
            "diagnose",
            "Llama-3-8B on L4 with NF4: 8 tok/s at 70 W, why so slow?",
            {
                "model": "Llama-3-8B",
                "gpu": "l4",
                "precision": "nf4",
                "observed_throughput_tok_s": 8.0,
                "observed_power_w": 70.0,
            },
        ),
    ]


CASES = _cases()


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _by_text(case: Case) -> dict[str, Any]:
    return _plain(advise(case.text, settings=Settings()).to_dict())


def _by_flags(case: Case, capsys: Any) -> dict[str, Any]:
    argv = [case.protocol, "--json"]
    facts = dict(case.facts)
    # The estimator's command has no language: a region instead.
    if case.protocol == "estimate" and facts.pop("language", "en") == "zh":
        facts.setdefault("region", "china")  # the advisor's default for a Chinese question
    for name, value in facts.items():
        argv += [FLAG_NAMES[name], str(value)]
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _by_tool(case: Case) -> dict[str, Any]:
    spec = next(s for s in TOOLS if s.name == case.protocol)
    arguments = {a.name: a.default for a in spec.arguments}
    undeclared = set(case.facts) - set(arguments)
    assert not undeclared, f"the {case.protocol} tool's schema lacks {sorted(undeclared)}"
    arguments.update(case.facts)
    return _plain(getattr(tools, case.protocol)(Settings(), **arguments))


def _monthly(answer: dict[str, Any]) -> dict[str, Any]:
    """Every monthly figure an answer states: money, the recommendation's cost and saving, each
    row's and each finding's $/month, the batching saving."""
    rec = answer.get("recommendation") or {}
    return {
        "money": answer.get("money"),
        "recommendation": [rec.get(k) for k in ("cost_usd_per_month", "saving_usd_per_month")],
        "rows": [row.get("cost_usd_per_month") for row in answer.get("rows") or []],
        "findings": [
            (f["rule"], f["mood"], (f.get("impact") or {}).get("extra_usd_per_month"))
            for f in answer.get("findings") or []
        ],
        "batching": (answer.get("batching") or {}).get("saving_usd_per_month"),
    }


def _summary(answer: dict[str, Any]) -> dict[str, Any]:
    rec = answer.get("recommendation") or {}
    return {
        "protocol": answer["protocol"],
        "mood": answer["mood"],
        "precision": rec.get("precision"),
        "batch_size": rec.get("batch_size"),
        "monthly": _monthly(answer),
    }


def test_the_cases_cover_both_languages_and_every_flags_protocol() -> None:
    assert len(CASES) >= 60
    assert {c.protocol for c in CASES} == {"optimize", "compare", "estimate", "diagnose"}
    zh = [c for c in CASES if c.facts.get("language") == "zh"]
    assert {c.protocol for c in zh} == {"optimize", "compare", "estimate", "diagnose"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_three_doors_give_one_answer(case: Case, capsys: Any) -> None:
    text = _by_text(case)
    # The text was read as the facts the flags state (else the doors ask different questions).
    parsed = text.pop("parsed")
    assert parsed["protocol"] == case.protocol
    assert parsed["language"] == case.facts.get("language", "en")
    flags = _by_flags(case, capsys)
    tool = _by_tool(case)
    if case.protocol == "estimate":
        assert _summary(text) == _summary(tool)
        assert text == tool
        money = text["money"]["current"]
        assert {k: money[k] for k in _ESTIMATOR_MONTHLY} == {
            k: flags["monthly"][k] for k in _ESTIMATOR_MONTHLY
        }
        assert text["current"]["energy_per_1k_tokens_j"] == flags["energy_per_1k_tokens_j"]
        return
    assert _summary(text) == _summary(flags) == _summary(tool)
    assert text == flags == tool


# The monthly figures the estimator's own command and the advisor's estimate both state.
_ESTIMATOR_MONTHLY = (
    "requests",
    "energy_kwh",
    "energy_kwh_range",
    "cost_usd",
    "cost_usd_range",
    "co2_kg",
    "co2_kg_range",
)
