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


def test_doctor_says_the_guard_is_off_not_missing(capsys):
    main(["doctor", "--no-torch"])
    guard_line = next(
        line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("guard ")
    )
    assert "off in this process" in guard_line and "import ecoguard.auto" in guard_line
    assert "not installed" not in guard_line  # the package is installed: it is running this
