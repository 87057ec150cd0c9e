"""The package's shape (tools/check_layout.py): no import cycle between ecoguard's packages, no
module over 600 lines, no function over 80, no ImportError guard or unexplained function-local
import of our own modules. The checker is tested on a small package that breaks each rule."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tool_scripts import load_tool


@pytest.fixture(scope="module")
def layout():
    return load_tool("check_layout")


def test_the_package_has_the_shape_it_promises(layout):
    """The package and, beside it, tools/ (issue 34: scripts and their packages)."""
    assert len(list((layout.ROOT / "tools").rglob("*.py"))) >= 8  # read: scripts + reference/
    problems = layout.check()
    assert problems == [], "\n".join(problems)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_the_checker_finds_each_kind_of_problem(layout, tmp_path):
    package = tmp_path / "ecoguard"
    _write(package, "__init__.py", "")
    _write(package, "alpha/__init__.py", "from ecoguard.beta import thing\n")
    _write(package, "beta/__init__.py", "thing = 1\n")
    _write(
        package,
        "beta/late.py",
        """
        def later():
            from ecoguard.alpha import thing
            return thing


        def allowed():
            from ecoguard.gamma import heavy  # lazy: pulls in a heavy third-party library
            return heavy
        """,
    )
    _write(
        package,
        "gamma.py",
        "try:\n    from ecoguard.beta import thing\nexcept ImportError:\n    thing = None\n"
        "heavy = 2\n",
    )
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    _write(package, "delta.py", f"def long():\n{body}\n    return 0\n" + "#\n" * 520)
    problems = layout.check(package=package)
    text = "\n".join(problems)
    assert "ecoguard/beta/late.py:3: function-local import" in text
    assert "late.py:8" not in text  # a marked lazy import is allowed
    assert "ecoguard/gamma.py:2: ImportError guard" in text
    assert "ecoguard/delta.py:1: function long has 87 lines" in text
    assert "ecoguard/delta.py:1: module has 607 lines" in text
    assert "import cycle between packages: ecoguard.alpha <-> ecoguard.beta" in text
    assert len(problems) == 5, text


def test_a_clean_package_passes(layout, tmp_path):
    package = tmp_path / "ecoguard"
    _write(package, "__init__.py", "")
    _write(package, "alpha/__init__.py", "from ecoguard.beta import thing\n")
    _write(package, "beta/__init__.py", "thing = 1\n")
    assert layout.check(package=package) == []


def test_the_checker_finds_a_circle_between_modules_of_one_package(layout, tmp_path):
    """Issue 28: answers -> registry -> sections -> answers (a type-only import counts too)."""
    package = tmp_path / "ecoguard"
    _write(package, "__init__.py", "")
    _write(package, "advisor/__init__.py", "")
    _write(package, "advisor/answers.py", "from ecoguard.advisor.registry import TABLE\n")
    _write(package, "advisor/registry.py", "from ecoguard.advisor import sections\nTABLE = 1\n")
    _write(
        package,
        "advisor/sections.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from ecoguard.advisor.answers import Answer\n",
    )
    _write(package, "advisor/rendering.py", "from ecoguard.advisor.answers import Answer\n")
    problems = layout.check(package=package)
    assert problems == [
        "ecoguard.advisor: import cycle between modules: ecoguard.advisor.answers <-> "
        "ecoguard.advisor.registry <-> ecoguard.advisor.sections"
    ]
    _write(package, "advisor/registry.py", "TABLE = 1\n")
    assert layout.check(package=package) == []


def test_the_checker_reads_tools_like_the_package(layout, tmp_path):
    """tools/ beside the package: a long function or module is found (a table may say so),
    and a cycle between modules that import each other by top-level or relative name."""
    package = tmp_path / "ecoguard"
    _write(package, "__init__.py", "")
    tools = tmp_path / "tools"
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    _write(
        tools, "build_thing.py", f"import json\nfrom thing import readme\n\n\ndef main():\n{body}\n"
    )
    _write(tools, "helper.py", "import sys\n" * 601)
    _write(tools, "thing/__init__.py", "")
    _write(tools, "thing/readme.py", "from thing.sources import SOURCES\n")
    _write(tools, "thing/sources.py", "from . import readme\nSOURCES = ()\n")
    _write(tools, "thing/names.py", f"def table():  # layout: table\n{body}\n")
    assert layout.check(package=package) == [
        "tools/build_thing.py:5: function main has 86 lines (> 80)",
        "tools/helper.py:1: module has 601 lines (> 600)",
        "tools: import cycle between modules: thing.readme <-> thing.sources",
    ]
    _write(tools, "thing/sources.py", "import thing.names\nSOURCES = ()\n")
    _write(tools, "helper.py", "import sys\n")
    _write(
        tools, "build_thing.py", "from thing import readme, sources\n\n\ndef main():\n    pass\n"
    )
    assert layout.check(package=package) == []
