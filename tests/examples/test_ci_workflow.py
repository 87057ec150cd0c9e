"""The GitHub Actions example (examples/ci_audit) installs ecoguard from its git repository (it is
not on PyPI: `pip install ecoguard` finds no distribution), fails with a clear message when the
repository variable that names it is missing, and docs/audit.md shows the same steps."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "ci_audit" / ".github" / "workflows" / "ecoguard-audit.yml"


def _steps(text: str) -> list[dict]:
    return yaml.safe_load(text)["jobs"]["audit"]["steps"]


def _install_step() -> dict:
    steps = [s for s in _steps(WORKFLOW.read_text()) if "pip install" in s.get("run", "")]
    assert len(steps) == 1
    return steps[0]


def _run_install(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    """The install step's script under bash, with a fake pip that records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_pip = bin_dir / "pip"
    fake_pip.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "pip-args"}\n')
    fake_pip.chmod(0o755)
    step = _install_step()
    assert step["env"] == {"ECOGUARD_GIT_URL": "${{ vars.ECOGUARD_GIT_URL }}"}
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ECOGUARD_GIT_URL": url}
    return subprocess.run(
        ["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=30
    )


def test_install_from_the_named_repository(tmp_path: Path) -> None:
    done = _run_install(tmp_path, "https://git.example.org/ecoguard.git@v0.1.0")
    assert done.returncode == 0, done.stdout + done.stderr
    args = (tmp_path / "pip-args").read_text().split()
    assert args == ["install", "git+https://git.example.org/ecoguard.git@v0.1.0"]


def test_missing_repository_variable_fails_with_what_to_set(tmp_path: Path) -> None:
    done = _run_install(tmp_path, "")
    assert done.returncode == 1
    assert re.search(r"::error::set the repository variable ECOGUARD_GIT_URL", done.stdout)
    assert not (tmp_path / "pip-args").exists()  # pip never ran


def test_no_step_installs_from_pypi() -> None:
    for text in (WORKFLOW.read_text(), (ROOT / "docs" / "audit.md").read_text()):
        assert not re.search(r"pip install ecoguard\b", text)


def test_docs_show_the_example_steps() -> None:
    doc = (ROOT / "docs" / "audit.md").read_text()
    block = re.search(r"```yaml\n(name: ecoguard audit\n.*?)```", doc, re.S)
    assert block is not None
    documented, example = _steps(block.group(1)), _steps(WORKFLOW.read_text())

    def without_names(steps: list[dict]) -> list[dict]:
        return [{k: v for k, v in s.items() if k != "name"} for s in steps]

    assert without_names(documented) == without_names(example)
