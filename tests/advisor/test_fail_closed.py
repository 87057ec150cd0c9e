"""The advisor does not fail open (issue 28): a bug in the estimator, the rules or the tables
behind an answer raises (a traceback in tests) instead of becoming a quiet GRAY answer, and the
CLI says it on one line, in the question's language, with exit 1; a usage error is one line in
the question's language with exit 2."""

from __future__ import annotations

import pytest

import ecoguard.advisor.estimates as estimates
import ecoguard.advisor.protocols.base as base
import ecoguard.advisor.protocols.diagnosing as diagnosing
from ecoguard.advisor.answers import advise
from ecoguard.advisor.cli import internal_error_line, usage_error_line
from ecoguard.cli import main


def _broken(*_args, **_kwargs):
    raise RuntimeError("seeded bug")


# Where each seam lives, and a question whose answer goes through it.
SEAMS = [
    (estimates, "estimate", "What will Mistral-7B on an A800 cost for 1M requests a month?"),
    (estimates, "evaluate", "Greenest config for Qwen2.5-7B on A800"),
    (base.knowledge, "reference_rows", "Compare all precisions for Mistral-7B on A800"),
    (
        base.knowledge,
        "equivalents",
        "What will Mistral-7B on an A800 cost for 1M requests a month?",
    ),
    (diagnosing, "explain", "Mistral-7B on A800 with load_in_8bit=True, I only get 10 tok/s"),
]


@pytest.mark.parametrize(("owner", "name", "question"), SEAMS, ids=[s[1] for s in SEAMS])
def test_a_bug_behind_an_answer_raises(monkeypatch, owner, name, question) -> None:
    monkeypatch.setattr(owner, name, _broken)
    with pytest.raises(RuntimeError, match="seeded bug"):
        advise(question)


@pytest.mark.parametrize(
    ("question", "words"),
    [
        ("What will Mistral-7B on an A800 cost for 1M requests a month?", "internal error"),
        ("Mistral-7B 在 A800 上每月 100 万次请求要花多少钱？", "内部错误"),
    ],
)
def test_the_cli_names_a_bug_on_one_line_with_exit_1(monkeypatch, capsys, question, words):
    monkeypatch.setattr(estimates, "estimate", _broken)
    assert main(["advise", question]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and words in captured.err
    assert "RuntimeError: seeded bug" in captured.err and "Traceback" not in captured.err


def test_the_flags_commands_name_a_bug_in_their_language(monkeypatch, capsys) -> None:
    monkeypatch.setattr(estimates, "estimate", _broken)
    argv = ["optimize", "--model", "Mistral-7B", "--gpu", "a800", "--language", "zh"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("ecoguard: 内部错误：RuntimeError") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "lead"),
    [
        (["advise", "你好，今天天气怎么样？"], "ecoguard: 错误：没看懂你想问什么"),
        (["advise", "hello, how is the weather?"], "ecoguard: error: I could not tell"),
        (
            ["advise", "Qwen2.5-7B 在 A800 和 H100 上每月要花多少钱"],
            "ecoguard: 错误：无法回答这个问题（the question names more than one GPU",
        ),
        (["optimize", "--model", "Mistral-7B", "--gpu", "zz9000", "--language", "zh"], "错误："),
    ],
)
def test_usage_errors_are_one_line_in_the_questions_language(capsys, argv, lead) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(lead) or lead in captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err


def test_error_lines_are_one_line() -> None:
    assert usage_error_line("two\nlines", "en") == "ecoguard: error: two lines"
    assert usage_error_line("已经是中文的错误信息", "zh") == "ecoguard: 错误：已经是中文的错误信息"
    line = internal_error_line(KeyError("a\nb"), "en")
    assert "\n" not in line and line.startswith("ecoguard: internal error: KeyError")


@pytest.mark.parametrize(
    "question", ["我用了 load_in_8bit=True，怎么办？", "I used load_in_8bit=True, what do I do?"]
)
def test_a_trap_setting_with_what_to_do_is_answered(capsys, question) -> None:
    """It exited 2 with an English message: the setting names a trap (int8-mixed)."""
    assert main(["advise", question, "--json"]) == 0
    out = capsys.readouterr().out
    assert '"rule": "int8-mixed"' in out and '"protocol": "diagnose"' in out
    answer = advise(question)
    assert answer.language == ("zh" if "怎么办" in question else "en")
