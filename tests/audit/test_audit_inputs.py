"""Bad input never crashes the audit and never runs code: each problem is reported per file
and the other files are still audited."""

from __future__ import annotations

import json
import os
import sys

import pytest

from ecoguard.audit import audit_paths, audit_source
from ecoguard.audit.sources import MAX_FILE_BYTES

TRAP = "from transformers import BitsAndBytesConfig\ncfg = BitsAndBytesConfig(load_in_8bit=True)\n"


def _kinds(result):
    return sorted((p.path.rsplit("/", 1)[-1], p.kind) for p in result.problems)


def test_bad_files_are_reported_and_the_rest_audited(tmp_path):
    (tmp_path / "good.py").write_text(TRAP)
    (tmp_path / "syntax.py").write_text("def broken(:\n    pass\n")
    (tmp_path / "latin.py").write_bytes(b"x = '\xe9\xff'\n")
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\n")
    (tmp_path / "huge.py").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    (tmp_path / "nb.ipynb").write_text("{not json")
    result = audit_paths([tmp_path])
    assert [f.rule for f in result.findings] == ["int8-mixed"]
    assert _kinds(result) == [
        ("huge.py", "too-large"),
        ("latin.py", "decode-error"),
        ("nb.ipynb", "bad-notebook"),
        ("nul.py", "syntax-error"),
        ("syntax.py", "syntax-error"),
    ]
    syntax = next(p for p in result.problems if p.path.endswith("syntax.py"))
    assert syntax.line == 1
    assert result.exit_code() == 2


def test_declared_encoding_is_honoured(tmp_path):
    (tmp_path / "cookie.py").write_bytes(
        b"# -*- coding: latin-1 -*-\nname = '\xe9'\n" + TRAP.encode()
    )
    result = audit_paths([tmp_path / "cookie.py"])
    assert result.problems == [] and [f.location.line for f in result.findings] == [4]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_unreadable_file(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    path = tmp_path / "secret.py"
    path.write_text(TRAP)
    path.chmod(0)
    try:
        assert _kinds(audit_paths([path])) == [("secret.py", "unreadable")]
    finally:
        path.chmod(0o644)


def test_read_failure_is_reported_per_file(tmp_path, monkeypatch):
    """Whatever the user (root reads mode-0 files), a read that fails is one problem."""
    import os

    (tmp_path / "good.py").write_text(TRAP)
    (tmp_path / "bad.py").write_text(TRAP)
    real_open = os.open

    def open_(path, *args, **kwargs):
        if os.fspath(path).endswith("bad.py"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    result = audit_paths([tmp_path])
    assert _kinds(result) == [("bad.py", "unreadable")]
    assert len(result.findings) == 1


def test_missing_path_is_an_error_but_others_are_audited(tmp_path):
    (tmp_path / "good.py").write_text(TRAP)
    result = audit_paths([tmp_path / "nope.py", tmp_path / "good.py"])
    assert _kinds(result) == [("nope.py", "not-found")]
    assert len(result.findings) == 1


def test_symlink_loop_and_links_out_of_tree(tmp_path):
    tree = tmp_path / "tree"
    outside = tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (outside / "secret.py").write_text(TRAP)
    (tree / "app.py").write_text(TRAP)
    (tree / "loop").symlink_to(tree, target_is_directory=True)  # a directory loop
    (tree / "self.py").symlink_to(tree / "self.py")  # a file that links to itself
    (tree / "escape").symlink_to(outside, target_is_directory=True)
    (tree / "escape.py").symlink_to(outside / "secret.py")
    (tree / "alias.py").symlink_to(tree / "app.py")  # inside the tree: same file, audited once
    (tree / "dangling.py").symlink_to(tmp_path / "missing.py")
    result = audit_paths([tree])
    assert [f.location.path.rsplit("/", 1)[-1] for f in result.findings] == ["app.py"]
    kinds = _kinds(result)
    assert ("loop", "symlink-loop") in kinds
    assert ("self.py", "symlink-loop") in kinds
    assert ("escape", "symlink-outside") in kinds
    assert ("escape.py", "symlink-outside") in kinds
    assert ("dangling.py", "unreadable") in kinds
    assert not any("secret" in p for p in result.files)


def test_exclude_and_default_skipped_directories(tmp_path):
    for sub in ("src", "tests", ".venv", "__pycache__", "node_modules"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "m.py").write_text(TRAP)
    result = audit_paths([tmp_path], exclude=["tests/*"])
    assert [f.location.path.rsplit("/", 2)[-2] for f in result.findings] == ["src"]
    assert audit_paths([tmp_path], exclude=["*.py"]).files == []


def test_notebook_with_a_broken_cell_audits_the_other_cells(tmp_path):
    def code(text):
        return {"cell_type": "code", "metadata": {}, "outputs": [], "source": text}

    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            code("from transformers import BitsAndBytesConfig\n"),
            code("def broken(:\n"),
            code(["x = 1\n", "cfg = BitsAndBytesConfig(load_in_8bit=True)\n"]),
            code("await something()\n"),  # top-level await is fine in a notebook
        ],
    }
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(notebook))
    result = audit_paths([path])
    (finding,) = result.findings
    assert (finding.location.cell, finding.location.line) == (3, 2)
    (problem,) = result.problems
    assert (problem.kind, problem.cell, problem.line) == ("syntax-error", 2, 1)


def test_audit_never_executes_the_audited_code(tmp_path):
    marker = tmp_path / "MARKER"
    payload = (
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('ran')\n"
        "raise SystemExit(3)\n"
        "if __name__ == '__main__':\n"
        f"    pathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from transformers import AutoModelForCausalLM\n"
        "m = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B-Instruct', load_in_4bit=True)\n"
    )
    (tmp_path / "evil.py").write_text(payload)
    (tmp_path / "setup.py").write_text(payload)
    (tmp_path / "conftest.py").write_text(payload)
    modules_before = set(sys.modules)
    result = audit_paths([tmp_path])
    assert not marker.exists()
    assert "evil" not in set(sys.modules) - modules_before
    assert sum(f.rule == "small-model-quant" for f in result.findings) == 3


def test_pathological_source_is_reported_not_crashing():
    deep = "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
    result = audit_source(deep, "deep.py")
    assert [p.kind for p in result.problems] == ["syntax-error"]
    assert result.exit_code() == 2


def test_unknown_gpu_is_a_usage_error():
    from ecoguard.errors import UsageError

    with pytest.raises(UsageError):
        audit_source(TRAP, gpu="not-a-gpu-9000")
