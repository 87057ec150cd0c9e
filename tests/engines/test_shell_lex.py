"""The launch-file shell lexer: words and lines as bash reads them, nothing run."""

from __future__ import annotations

import pytest

from ecoguard.engines.shell_lex import ShellEnv, shell_commands


def words(text: str) -> list[list[str]]:
    return [[word for word, _ in command] for command in shell_commands(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a 'b c' \"d e\" f\\ g", [["a", "b c", "d e", "f g"]]),
        ("a foo#bar # comment", [["a", "foo#bar"]]),
        ("a; b && c || d | e & f", [["a"], ["b"], ["c"], ["d"], ["e"], ["f"]]),
        ("cmd 2>&1 >log", [["cmd", "2>&1", ">log"]]),
        ("a $'x\\ty\\'z\\x41'", [["a", "x\ty'zA"]]),
        ('a "q\\"uote" "\\$x"', [["a", 'q"uote', "$x"]]),
        ("a $(b $(c)) `d` $1 $@ ${#x}", [["a", "$(b $(c))", "`d`", "$1", "$@", "${#x}"]]),
        ("X=1; a $X ${X} ${Y:-2} ${Y-3} ${X:+4}", [["X=1"], ["a", "1", "1", "2", "3", "4"]]),
        ("X=; a ${X:-d} ${X-e}", [["X="], ["a", "d"]]),  # :- treats empty as unset, - does not
        ("A='1 2'; a $A \"$A\"", [["A=1 2"], ["a", "1", "2", "1 2"]]),
        ("A=x b $A", [["A=x", "b", "$A"]]),  # a prefix assignment is not the shell's
        (
            "export A=1 B=2; readonly C=3; a $A $B $C",
            [["export", "A=1", "B=2"], ["readonly", "C=3"], ["a", "1", "2", "3"]],
        ),
        ("a \\\n  b", [["a", "b"]]),
        ("echo 'open\nvllm serve m", [["vllm", "serve", "m"]]),  # a stray quote drops its command
    ],
)
def test_words(text, expected):
    assert words(text) == expected


def test_each_word_keeps_its_line():
    text = "vllm serve m \\\n  --max-num-seqs 1 \\\n  --x 'a\nb' --y\n"
    (command,) = shell_commands(text)
    assert [line for _, line in command] == [1, 1, 1, 2, 2, 3, 3, 4]


def test_expansions_are_budgeted():
    env = ShellEnv(100)
    text = "A=" + "x" * 60 + "\nb $A $A $A\n"
    (_, command) = shell_commands(text, 1, env)
    assert [word for word, _ in command] == ["b", "x" * 60, "$A", "$A"]
