"""ecoguard doctor."""

from __future__ import annotations

import json

from ecoguard.cli import main
from ecoguard.deployment import SoftwareVersions
from ecoguard.guard import environment


def test_doctor_json_reports_versions(capsys):
    code = main(["doctor", "--json", "--no-torch"])
    report = json.loads(capsys.readouterr().out)
    assert set(report["versions"]) == {"torch", "transformers", "bitsandbytes", "torchao"}
    assert report["versions"]["transformers"]
    assert report["guard_installed"] is False
    assert isinstance(report["faults"], dict)
    assert code == (1 if report["findings"] else 0)


def test_doctor_flags_a_nightly_stack(capsys, monkeypatch):
    monkeypatch.setattr(
        environment,
        "software_versions",
        lambda: SoftwareVersions(
            torch="2.7.0.dev20250301+cu126", transformers="5.0", torchao="0.18.0"
        ),
    )
    assert main(["doctor", "--no-torch"]) == 1
    out = capsys.readouterr().out
    assert "(nightly/dev build)" in out and "nightly-build" in out
