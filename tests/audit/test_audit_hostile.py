"""Hostile input to the audit (issue 21): work linear in the size of the module, device files
and fifos refused, one unreadable notebook never stops the others, IPython help lines are not
syntax errors, and a time limit for servers that audit text from others."""

from __future__ import annotations

import ast
import json
import os
import threading

import pytest

from ecoguard.audit import audit_paths, audit_source
from ecoguard.audit.core import AuditTimeLimitError
from ecoguard.audit.sources import MAX_FILE_BYTES

TRAP = "from transformers import BitsAndBytesConfig\ncfg = BitsAndBytesConfig(load_in_8bit=True)\n"


def _generate_loop(calls: int) -> str:
    lines = ["for prompt in prompts:"]
    lines += [f"    out{i} = model.generate(prompt, max_new_tokens=8)" for i in range(calls)]
    return "\n".join(lines) + "\n"


def _node_visits(monkeypatch, source: str) -> tuple[int, int]:
    """(nodes in the module, nodes the audit visited): every walk over the syntax tree goes
    through ast.iter_fields (ast.walk and ast.iter_child_nodes call it), so counting its calls
    counts the audit's node visits whatever helper makes them."""
    counter = {"visits": 0}
    real_iter_fields = ast.iter_fields

    def counting(node):
        counter["visits"] += 1
        return real_iter_fields(node)

    nodes = sum(1 for _ in ast.walk(ast.parse(source)))
    monkeypatch.setattr(ast, "iter_fields", counting)
    try:
        result = audit_source(source)
    finally:
        monkeypatch.setattr(ast, "iter_fields", real_iter_fields)
    assert len(result.findings) == source.count("generate(")  # every call still judged
    return nodes, counter["visits"]


def test_audit_work_is_linear_in_generate_calls_in_one_loop(monkeypatch):
    """Before: every generate call re-walked its whole loop (twice), so 4,000 calls in one loop
    cost 4,000 walks of 4,000 statements (165 s). Now the work per node is constant."""
    small_nodes, small_visits = _node_visits(monkeypatch, _generate_loop(1000))
    big_nodes, big_visits = _node_visits(monkeypatch, _generate_loop(4000))
    assert big_nodes / small_nodes == pytest.approx(4, rel=0.05)
    # Linear: 4x the calls, about 4x the visits (quadratic would be 16x).
    assert big_visits / small_visits < 4 * 1.25
    assert big_visits / big_nodes < 25


def test_helper_called_from_many_loops_is_read_once(monkeypatch):
    """A helper holding the generate calls, called from many loops: the loops calling it are
    looked up once per helper, not once per generate call."""

    def source(n: int) -> str:
        body = "\n".join(f"    out{i} = model.generate(p)" for i in range(n))
        calls = "\n".join(f"for p in batch{i}:\n    serve(p)" for i in range(n))
        return f"def serve(p):\n{body}\n{calls}\n"

    small_nodes, small_visits = _node_visits(monkeypatch, source(500))
    big_nodes, big_visits = _node_visits(monkeypatch, source(2000))
    assert big_visits / small_visits < (big_nodes / small_nodes) * 1.25


def test_nested_dict_merges_are_read_once_each(monkeypatch):
    """``{**d, **d, ...}`` nested 7 deep would be 8**7 (2 million) reads if each merge were
    re-read; each expression is now read once."""
    from ecoguard.audit.index import ModuleIndex

    reads = {"n": 0}
    real_resolve = ModuleIndex.resolve

    def counting(self, expr, hops=0):
        reads["n"] += 1
        return real_resolve(self, expr, hops)

    monkeypatch.setattr(ModuleIndex, "resolve", counting)
    lines = ["d0 = {'load_in_8bit': True}"]
    lines += [f"d{i} = {{" + ", ".join([f"**d{i - 1}"] * 8) + "}" for i in range(1, 8)]
    lines += [
        "cfg = BitsAndBytesConfig(**d7)",
        "m = AutoModel.from_pretrained('x', quantization_config=cfg)",
    ]
    result = audit_source("\n".join(lines) + "\n")
    assert [f.rule for f in result.findings] == ["int8-mixed"]
    assert reads["n"] < 1000


def test_time_limit_stops_the_analysis_with_a_clear_error():
    with pytest.raises(AuditTimeLimitError, match=r"limit and was stopped"):
        audit_source(_generate_loop(50), time_limit_s=-1)
    # no limit (the CLI) or a generous one: the same source is audited
    assert len(audit_source(_generate_loop(50), time_limit_s=60).findings) == 50


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_py_link_to_dev_zero_is_refused_not_read_forever(tmp_path):
    """st_size of /dev/zero is 0, so a size check on stat passed and read_bytes() grew
    without end (5 GB in 12 s). Only regular files are read, and the size counts as read."""
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    (tmp_path / "good.py").write_text(TRAP)
    # named directly (a link inside a walked tree that leaves it is refused anyway)
    result = audit_paths([tmp_path / "zero.py", tmp_path / "good.py"])
    [problem] = result.problems
    assert problem.path.endswith("zero.py") and problem.kind == "unreadable"
    assert "not a regular file (a device)" in problem.message
    assert [f.rule for f in result.findings] == ["int8-mixed"]
    assert result.exit_code() == 2


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs fifos")
def test_a_fifo_named_py_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    (tmp_path / "good.py").write_text(TRAP)
    outcome: dict[str, object] = {}

    def run() -> None:
        outcome["result"] = audit_paths([fifo, tmp_path / "good.py"])

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=30)
    if worker.is_alive():  # unblock the audit so the test process can end, then fail
        with open(fifo, "w"):
            pass
        pytest.fail("the audit blocked opening a fifo")
    result = outcome["result"]
    [problem] = result.problems
    assert problem.kind == "unreadable" and "a fifo" in problem.message
    assert [f.rule for f in result.findings] == ["int8-mixed"]


def test_size_is_counted_while_reading(tmp_path, monkeypatch):
    """A file that grows past the limit after stat (or whose stat lies) is still cut off."""
    big = tmp_path / "big.py"
    big.write_bytes(b"#" * (MAX_FILE_BYTES + 10))
    real_fstat = os.fstat

    class Lying:
        def __init__(self, real):
            self._real = real

        def __getattr__(self, name):
            return 0 if name == "st_size" else getattr(self._real, name)

    monkeypatch.setattr(os, "fstat", lambda fd: Lying(real_fstat(fd)))
    result = audit_paths([big])
    assert [(p.kind, "limit" in p.message) for p in result.problems] == [("too-large", True)]


def test_a_3000_deep_notebook_is_reported_and_the_next_file_audited(tmp_path):
    (tmp_path / "a_deep.ipynb").write_text("[" * 3000 + "]" * 3000)
    (tmp_path / "b_trap.py").write_text(TRAP)
    result = audit_paths([tmp_path])
    [problem] = result.problems
    assert problem.path.endswith("a_deep.ipynb") and problem.kind == "bad-notebook"
    assert "nested too deeply" in problem.message
    assert [(f.rule, f.location.path.rsplit("/", 1)[-1]) for f in result.findings] == [
        ("int8-mixed", "b_trap.py")
    ]


def _notebook(*cells: str) -> str:
    return json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {},
            "cells": [
                {"cell_type": "code", "source": src, "metadata": {}, "outputs": []} for src in cells
            ],
        }
    )


def test_ipython_help_lines_are_not_syntax_errors(tmp_path):
    nb = tmp_path / "help.ipynb"
    nb.write_text(_notebook("?print\n??len\nprint?\nlen??  \n", TRAP))
    result = audit_paths([nb])
    assert result.problems == []
    assert [(f.rule, f.location.cell) for f in result.findings] == [("int8-mixed", 2)]


def test_many_broken_notebook_cells_are_each_reported_once(tmp_path):
    nb = tmp_path / "broken.ipynb"
    cells = ["def broken(:\n    pass\n"] * 300 + [TRAP]
    nb.write_text(_notebook(*cells))
    result = audit_paths([nb])
    assert len(result.problems) == 300
    assert {(p.kind, p.line) for p in result.problems} == {("syntax-error", 1)}
    assert [p.cell for p in result.problems] == list(range(1, 301))
    assert [(f.rule, f.location.cell) for f in result.findings] == [("int8-mixed", 301)]


def test_file_names_cannot_forge_report_lines_or_break_sarif(tmp_path):
    """A name with a newline and an ANSI escape could forge a line (or recolour the terminal)
    in the text report; a name that is not UTF-8 (a surrogate escape from os.listdir) crashed
    the SARIF and JSON renderers and ``-o``."""
    from ecoguard.audit.render import render_json, render_sarif, render_text
    from ecoguard.cli import main

    forged = "a\nfake.py:1:1 red int8-mixed\x1b[2J.py"
    (tmp_path / forged).write_text(TRAP)
    (tmp_path / os.fsdecode(b"bad\xff.py")).write_text(TRAP)
    result = audit_paths([tmp_path])
    assert len(result.findings) == 2
    text = render_text(result)
    assert "\x1b" not in text and "\ufffd" not in text
    assert "a\\nfake.py:1:1 red int8-mixed\\x1b[2J.py" in text
    assert "bad\\xff.py" in text
    assert not any(line.startswith("fake.py") for line in text.splitlines())
    for rendered in (render_json(result), render_sarif(result)):
        rendered.encode("utf-8")  # no lone surrogate left
        json.loads(rendered)
    assert "bad%FF.py" in render_sarif(result)  # the URI keeps the file's own byte
    out = tmp_path / "report.sarif"
    assert main(["audit", str(tmp_path), "--format", "sarif", "-o", str(out)]) == 1
    json.loads(out.read_text(encoding="utf-8"))
