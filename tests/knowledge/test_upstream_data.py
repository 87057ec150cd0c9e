"""The vendored upstream files (data/upstream/): exactly what the build reads, unchanged."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import pytest
from knowledge_support import build_script

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = REPO / "data" / "upstream"
SHARED = (REPO / ".." / "shared" / "reference-data").resolve()
MANIFEST_ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+) \| ([0-9a-f]{64}) \|$")


def _manifest() -> dict[str, str]:
    text = (UPSTREAM / "PROVENANCE.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        match = MANIFEST_ROW.match(line)
        if match:
            rows[match.group(1)] = match.group(3)
    return rows


def _vendored() -> set[str]:
    return {
        p.relative_to(UPSTREAM).as_posix()
        for p in UPSTREAM.rglob("*")
        if p.is_file() and p.name != "PROVENANCE.md"
    }


def test_manifest_lists_every_vendored_file_with_its_checksum():
    manifest = _manifest()
    assert set(manifest) == _vendored()
    for rel, digest in manifest.items():
        assert hashlib.sha256((UPSTREAM / rel).read_bytes()).hexdigest() == digest, rel


def test_build_reads_exactly_the_vendored_files(tmp_path, monkeypatch):
    """Nothing vendored that the build does not read, nothing read that is not vendored."""
    module = build_script()
    opened: set[str] = set()
    root = str(UPSTREAM) + "/"

    def hook(event, args):
        if event == "open" and isinstance(args[0], str) and args[0].startswith(root):
            opened.add(args[0][len(root) :])

    sys.addaudithook(hook)  # cannot be removed; it only records paths under data/upstream/
    module.build(UPSTREAM, tmp_path)
    snapshot = set(opened)
    opened.clear()
    assert snapshot == _vendored()


def test_attribution_licences_and_no_formula_dataset():
    provenance = (UPSTREAM / "PROVENANCE.md").read_text(encoding="utf-8")
    for needed in ("Hongping Zhang, EcoCompute (2026)", "10.5281/zenodo.19647290", "CC BY 4.0"):
        assert needed in provenance
    assert "MIT" in provenance
    assert not any("ecocompute_benchmark_dataset" in rel for rel in _vendored())
    size = sum((UPSTREAM / rel).stat().st_size for rel in _vendored())
    assert size < 512 * 1024, f"vendored upstream files grew to {size} bytes"


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/reference-data is absent")
def test_vendored_files_equal_the_collected_copy():
    for rel in sorted(_vendored()):
        assert (UPSTREAM / rel).read_bytes() == (SHARED / rel).read_bytes(), rel


def test_wheel_config_keeps_upstream_out_and_ships_the_rest_of_data():
    """force-include would ignore an exclude, so data/ must reach the wheel by the sources
    mapping with data/upstream excluded (checked by building a wheel: upstream absent, the
    same files as before otherwise)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"
    ]["wheel"]
    assert "force-include" not in wheel
    assert "/data/upstream" in wheel["exclude"]
    assert set(wheel["only-include"]) >= {"ecoguard", "data", "grafana"}
    assert wheel["sources"] == {"data": "ecoguard/_data", "grafana": "ecoguard/_grafana"}
