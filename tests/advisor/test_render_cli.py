"""Rendering (golden files), the CLI (exit codes, --json, --plain, NO_COLOR) and start-up cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ecoguard.advisor.answers import advise
from ecoguard.advisor.rendering import bar_chart, render
from ecoguard.cli import main

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "compare_qwen25_7b_5090.md": ("Compare all precisions for Qwen2.5-7B on a 5090", "md", False),
    "estimate_yi6b_zh.txt": ("我想用 Yi-6B 跑 100 万字, 要花多少钱?", "text", False),
    "diagnose_int8_a800_plain.md": (
        "Mistral-7B on A800 with load_in_8bit=True, I only get 10 tok/s",
        "md",
        True,
    ),
    "amd_gray.md": ("Qwen2-1.5B on an AMD MI300X, cost?", "md", False),
    # The JSON edge: every protocol's records turned into JSON (figures rounded as before).
    "optimize_qwen25_3b_5090.json": (
        "What is the greenest config for Qwen2.5-3B on an RTX 5090?",
        "json",
        False,
    ),
    "compare_qwen25_7b_5090.json": (
        "Compare all precisions for Qwen2.5-7B on a 5090",
        "json",
        False,
    ),
    "estimate_mistral_a800.json": (
        "What will Mistral-7B on an A800 cost for a million requests a month?",
        "json",
        False,
    ),
    "diagnose_int8_a800.json": (
        "Mistral-7B on A800 with load_in_8bit=True, I only get 10 tok/s",
        "json",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    question, fmt, plain = CASES[name]
    text = render(advise(question), fmt=fmt, plain=plain, color=False)
    path = GOLDEN / name
    # Regenerate on purpose with ADVISOR_UPDATE_GOLDEN=1 (conftest clears ECOGUARD_* variables).
    if os.environ.get("ADVISOR_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with ADVISOR_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def test_every_answer_opens_with_mood_and_ends_with_citation():
    for question in (
        "Compare all precisions for Qwen2.5-7B on a 5090",
        "我想用 Yi-6B 跑 100 万字, 要花多少钱?",
    ):
        text = render(advise(question))
        assert text.startswith("[")
        last = text.strip().splitlines()[-1]
        assert "Hongping Zhang, EcoCompute (2026)" in last and "CC BY 4.0" in last
        assert "reference rows" in last or "条参考数据" in last


def test_bar_chart_scales_to_largest():
    lines = bar_chart(
        [("a", 100.0, "measured"), ("b", 50.0, "derived"), ("c", None, "none")], unit="J"
    )
    assert lines[0].count("#") == 30 and lines[1].count("#") == 15 and lines[2].endswith("-")


def test_cli_json(capsys):
    assert main(["advise", "Compare all precisions for Qwen2.5-7B on a 5090", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["protocol"] == "compare" and data["parsed"]["model"] == "Qwen2.5-7B"
    assert all("tier" in row for row in data["rows"])


def test_cli_plain_drops_persona(capsys):
    assert main(["advise", "Compare all precisions for Qwen2.5-7B on a 5090", "--plain"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "[GREEN]" or "EcoLobster" not in first


@pytest.mark.parametrize(
    "argv",
    [
        ["advise", ""],
        ["advise", "x" * 10_241],
        ["advise", "hello"],
        ["advise", "cost of Qwen2-7B on an RTX 9999"],
        ["optimize", "--model", "Qwen2-7B", "--gpu", "voodoo5"],
        ["compare", "--model", "Qwen2-7B", "--gpu", "a800", "--precision", "int3"],
        ["diagnose", "--model", "no-size-model", "--gpu", "a800"],
    ],
)
def test_cli_bad_input_exits_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ecoguard: error:") and "Traceback" not in err


def test_cli_commands(capsys):
    assert (
        main(["optimize", "--model", "Qwen2.5-3B", "--gpu", "5090", "--use", "api", "--json"]) == 0
    )
    data = json.loads(capsys.readouterr().out)
    # The same answer the question in words gets (the batch capped by the requests in flight).
    text = advise("What is the greenest config for Qwen2.5-3B on an RTX 5090 for an API?")
    assert data["recommendation"] == json.loads(json.dumps(text.result.recommendation, default=str))
    assert main(["compare", "--model", "Mistral-7B", "--gpu", "a800", "--format", "text"]) == 0
    assert "int8_pure" in capsys.readouterr().out
    assert (
        main(["diagnose", "--model", "Mistral-7B", "--gpu", "a800", "--throughput", "10", "--json"])
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["deployment"]["precision"] == "int8_mixed"


def test_no_color_when_not_a_tty_or_no_color(monkeypatch):
    from ecoguard.voice import use_color

    class Tty:
        def isatty(self):
            return True

    assert use_color(Tty(), environ={}) is True
    assert use_color(Tty(), environ={"NO_COLOR": "1"}) is False
    assert use_color(Tty(), environ={"NO_COLOR": ""}) is True  # empty NO_COLOR does not count

    class Pipe:
        def isatty(self):
            return False

    assert use_color(Pipe(), environ={}) is False


def test_alerts_and_answers_share_one_voice():
    """One voice module: the guard's alert and the advisor's answer open with the same tag, and
    the answer's lobster line comes from the same place (English for an unknown language)."""
    import ecoguard.voice as voice
    from ecoguard.findings import Finding, Mood

    finding = Finding(rule="int8-mixed", mood=Mood.ORANGE, title="t", message="m", fix="f")
    assert voice.render_alert(finding, log_format="lobster").startswith("[ORANGE] EcoLobster")
    assert voice.mood_tag(Mood.ORANGE) == "[ORANGE]"
    assert voice.lobster_line(Mood.RED, "fr") == voice.lobster_line(Mood.RED, "en")
    assert voice.lobster_line(Mood.GREEN, "zh").startswith("节能龙虾")
    assert voice.colorize("x", Mood.RED, False) == "x"
    assert voice.colorize("x", Mood.RED, True) == "\033[31mx\033[0m"


def test_no_torch_on_the_advise_path():
    code = (
        "import sys; from ecoguard.cli import main; import io, contextlib\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['advise', 'Compare all precisions for Qwen2.5-7B on a 5090'])\n"
        "bad = [m for m in ('torch', 'transformers', 'pynvml', 'prometheus_client') if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_chinese_answer_states_everyday_equivalents_in_chinese():
    from ecoguard.advisor import render

    text = render(advise("我想用 Yi-6B 跑 100 万字, 要花多少钱?"), fmt="text")
    line = next(ln for ln in text.splitlines() if "相当于" in ln)
    assert "公里" in line and "smartphone" not in line and "passenger car" not in line


def test_evidence_rows_show_the_change_vs_fp16_of_the_same_source():
    from ecoguard.advisor import render

    text = render(
        advise("My load_in_8bit bill is crazy on an A800, Mistral-7B"), fmt="md", plain=True
    )
    row = next(ln for ln in text.splitlines() if "int8_mixed/bs1/dyn-a800meta" in ln)
    # 9,608 J/1k against the same file's FP16 4,334 J/1k
    assert "+121.7%" in row


def test_a_recommendation_that_costs_more_is_not_printed_as_a_negative_saving() -> None:
    # A caller limiting optimize to BS 1 on a BS-32 setup gets a recommendation that costs
    # more: the reasons and the saving line say so plainly.
    from ecoguard.advisor import protocols
    from ecoguard.advisor.answers import Answer, build_deployment
    from ecoguard.advisor.question import Question

    question = Question("optimize", model="Qwen2.5-7B", gpu="l4", batch_size=32, use="chat")
    dep, defaults = build_deployment(question)
    result = protocols.optimize(protocols.Request(question, dep), use="chat", batch_sizes=(1,))
    assert result.recommendation["saving_pct"] < 0
    assert any(
        "smaller than your current 32" in r and "energy per token" in r
        for r in result.recommendation["reasons"]
    )
    text = render(Answer(result=result, defaults=tuple(defaults)), fmt="text", plain=True)
    assert "$-" not in text and "-1" not in text.split("Extra cost")[-1].split("\n")[0]
    assert "Extra cost: $" in text and "% more energy" in text


@pytest.mark.parametrize(
    "question",
    [
        "比较 Qwen2.5-7B 在 5090 上的所有精度",
        "Qwen2.5-3B 在 RTX 5090 上最省电的配置是什么? 用于 API",
        "我想用 Yi-6B 跑 100 万字, 要花多少钱?",
    ],
)
@pytest.mark.parametrize("fmt", ["md", "text"])
def test_chinese_answer_has_no_english_headers_or_field_names(question, fmt):
    answer = advise(question)
    assert answer.language == "zh"
    assert answer.result.protocol in ("compare", "optimize", "estimate")
    text = render(answer, fmt=fmt, plain=True)
    for english in (
        "Understood as",
        "model:",
        "precision:",
        "batch size:",
        " in / ",
        "use:",
        "region:",
        "precision |",
        "| rank",
        "| BS",
        "J/1k tok |",
        "VRAM GB",
        "$/month",
        "tier",
        "requests/month",
        "cost/month",
        "generated tokens per request",
        # tiers shown as words (the estimate's method text comes from the estimator, in English)
        "[measured]",
        "[reported]",
        "| derived",
        "(derived)",
        "）.",
    ):
        assert english not in text, (english, question)
    assert "理解为：" in text and "精度" in text


def test_cli_language_flag_answers_in_chinese(capsys):
    argv = ["compare", "--model", "Mistral-7B", "--gpu", "a800", "--format", "text"]
    assert main([*argv, "--language", "zh"]) == 0
    text = capsys.readouterr().out
    assert "理解为：" in text and "Understood as" not in text
    assert main(argv) == 0
    assert "Understood as: " in capsys.readouterr().out


def test_cli_and_library_flags_share_one_answer(capsys):
    from ecoguard.advisor.answers import answer
    from ecoguard.advisor.question import Question
    from ecoguard.config import Settings

    argv = ["diagnose", "--model", "Mistral-7B", "--gpu", "a800", "--throughput", "10", "--json"]
    assert main(argv) == 0
    cli = json.loads(capsys.readouterr().out)
    flags = Question.from_flags(
        "diagnose", model="Mistral-7B", gpu="a800", observed_throughput_tok_s=10.0
    )
    lib = answer(flags, Settings.from_env())
    assert cli == json.loads(json.dumps(lib.to_dict(), default=str))


def test_chinese_wording_stays_out_of_the_json():
    data = advise("我想用 Yi-6B 跑 100 万字, 要花多少钱?").to_dict()
    assert all(not k.endswith("_zh") for c in data["conversions"] for k in c)
    assert all(not k.endswith("_zh") for h in data["honesty"] for k in h)
