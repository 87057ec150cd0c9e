"""Bench test helpers: run ``ecoguard bench`` in-process on the tiny model with small numbers."""

from __future__ import annotations

import json

import pytest

from ecoguard.cli import main

SMALL = [
    "--prompt-tokens", "8",
    "--generation-tokens", "4",
    "--runs", "2",
    "--warmup", "1",
    "--idle-s", "0.02",
]  # fmt: skip


@pytest.fixture
def bench(capsys, tiny_llama_dir):
    """``bench(*extra_args, json_out=True) -> (exit_code, output)``; output is the parsed JSON
    document with ``--json``, else stdout text."""

    def run(*extra: str, json_out: bool = True, model: str | None = None):
        args = ["bench", "--model", model or str(tiny_llama_dir), "--backend", "simulated", *SMALL]
        args += list(extra)
        if json_out:
            args.append("--json")
        capsys.readouterr()
        code = main(args)
        out = capsys.readouterr().out
        return code, (json.loads(out) if json_out and out.strip() else out)

    return run


@pytest.fixture
def local_file(tmp_path, monkeypatch):
    """The local dataset path for this test (ECOGUARD_LOCAL_DATA wins over XDG_DATA_HOME)."""
    path = tmp_path / "local" / "rows.jsonl"
    monkeypatch.setenv("ECOGUARD_LOCAL_DATA", str(path))
    return path
