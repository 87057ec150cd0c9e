"""``ecoguard audit`` through ecoguard.cli.main: formats, SARIF validity, exit codes."""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest

from ecoguard.cli import main

INT8 = "from transformers import BitsAndBytesConfig\ncfg = BitsAndBytesConfig(load_in_8bit=True)\n"
FP8 = (
    "from torchao.quantization import Float8WeightOnlyConfig\n"
    "from transformers import TorchAoConfig\n"
    "cfg = TorchAoConfig(Float8WeightOnlyConfig())\n"
)
BS1 = "for p in prompts:\n    model.generate(**tok(p, return_tensors='pt'))\n"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "int8.py").write_text(INT8)  # orange
    (tmp_path / "fp8.py").write_text(FP8)  # red
    (tmp_path / "loop.py").write_text(BS1)  # yellow
    (tmp_path / "clean.py").write_text("print('hello')\n")
    return tmp_path


def test_exit_codes_follow_severity(project, capsys):
    assert main(["audit", str(project / "clean.py")]) == 0
    assert main(["audit", str(project)]) == 1
    assert main(["audit", str(project / "loop.py"), "--severity", "orange"]) == 0
    assert main(["audit", str(project / "int8.py"), "--severity", "orange"]) == 1
    assert main(["audit", str(project / "int8.py"), "--severity", "red"]) == 0
    assert main(["audit", str(project), "--severity", "red"]) == 1
    capsys.readouterr()


def test_usage_errors_exit_2(project, capsys):
    assert main(["audit"]) == 2
    assert main(["audit", str(project), "--severity", "purple"]) == 2
    assert main(["audit", str(project), "--format", "xml"]) == 2
    assert main(["audit", str(project), "--gpu", "no-such-gpu"]) == 2
    assert "unknown GPU" in capsys.readouterr().err


def test_parse_error_exits_2_but_reports_the_other_files(project, capsys):
    (project / "broken.py").write_text("def (:\n")
    assert main(["audit", str(project), "--format", "json"]) == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert {f["rule"] for f in report["findings"]} == {"int8-mixed", "fp8-eager", "batch-size-one"}
    assert [e["kind"] for e in report["errors"]] == ["syntax-error"]
    assert "broken.py" in captured.err


def test_text_groups_by_file_worst_first(project, capsys):
    assert main(["audit", str(project)]) == 1
    out = capsys.readouterr().out
    assert out.index("fp8.py") < out.index("int8.py") < out.index("loop.py")
    assert "fp8-eager" in out and "fix: " in out
    assert "3 file(s) audited" not in out and "4 file(s) audited: 3 finding(s)" in out


def test_json_shape(project, capsys):
    main(["audit", str(project / "int8.py"), "--json"])
    report = json.loads(capsys.readouterr().out)
    (finding,) = report["findings"]
    assert finding["rule"] == "int8-mixed" and finding["mood"] == "orange"
    assert finding["location"]["line"] == 2 and finding["location"]["column"] == 7
    assert finding["fix"] == "BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)"
    assert report["summary"]["by_mood"] == {"orange": 1}


def test_sarif_is_valid_and_maps_moods(project, capsys, sarif_schema, corpus, tmp_path):
    (project / "broken.py").write_text("def (:\n")
    shutil.copy(corpus / "notebook_int8_loop.ipynb", project / "nb.ipynb")
    shutil.copy(corpus / "old_style_load_in_8bit.py", project / "old.py")
    out_file = tmp_path / "audit.sarif"
    assert main(["audit", str(project), "--format", "sarif", "-o", str(out_file)]) == 2
    log = json.loads(out_file.read_text())
    jsonschema.validate(log, sarif_schema, format_checker=jsonschema.FormatChecker())
    run = log["runs"][0]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert "int8-mixed" in rules and "audit/transformers5-removed-kwarg" in rules
    levels = {r["ruleId"]: r["level"] for r in run["results"]}
    assert levels["fp8-eager"] == "error"
    assert levels["int8-mixed"] == "warning"
    assert levels["batch-size-one"] == "note"
    for result in run["results"]:
        assert rules[result["ruleIndex"]] == result["ruleId"]
        physical = result["locations"][0]["physicalLocation"]
        assert physical["artifactLocation"]["uri"].endswith((".py", ".ipynb"))
        if physical["artifactLocation"]["uri"].endswith(".py"):
            assert physical["region"]["startLine"] >= 1
    assert run["invocations"][0]["executionSuccessful"] is False
    assert run["invocations"][0]["toolExecutionNotifications"][0]["level"] == "error"


def test_sarif_schema_rejects_a_broken_log(sarif_schema):
    """The subset schema is not a rubber stamp: a missing message or bad level fails."""
    good = {
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{"message": {"text": "m"}}]}],
    }
    jsonschema.validate(good, sarif_schema)
    for broken in (
        {"version": "2.0.0", "runs": []},
        {"version": "2.1.0", "runs": [{"tool": {"driver": {}}}]},
        {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{}]}]},
        {
            "version": "2.1.0",
            "runs": [
                {
                    "tool": {"driver": {"name": "x"}},
                    "results": [{"message": {"text": "m"}, "level": "fatal"}],
                }
            ],
        },
        {"version": "2.1.0", "runs": [], "extra": 1},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, sarif_schema)


def test_relative_paths_and_exclude(project, capsys, monkeypatch):
    monkeypatch.chdir(project)
    assert main(["audit", ".", "--exclude", "fp8.py", "--exclude", "loop*", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [f["location"]["path"] for f in report["findings"]] == ["int8.py"]
