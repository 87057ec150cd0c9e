"""The audit under hostile probes, round 3 (issue 29, with issue 33's launch-file items).

* A launch file of an unexpected shape (a list under ``image:``) is skipped for that field and
  never hides the traps of the other files.
* Every reader of untrusted text (YAML, shell, Dockerfile, Python) is bounded in time and memory
  by its input's size: each probe of about 200 KB that used to run for tens of seconds (or not
  finish) runs in a child process with a hard timeout, so a regression fails instead of hanging.
  The bound asserted is CPU seconds of the child (not wall time: other jobs share the machine).
* ``ecoguard audit`` has a whole-run time limit (``--time-limit``), exit 2 past it, with the
  findings of the files audited before it still reported.
* Valid Docker and bash syntax cannot hide a trap: a tab after ``CMD``/``FROM``, the
  ``# escape=`` directive, ``$'...'`` quoting, ``#`` inside a word.
* Shell variables (``MODEL=${MODEL:-...}`` then ``vllm serve "$MODEL"``) are resolved.
* Fixes name what the user's file names (or a marked ``<...>`` slot), and ``ecoguard --help``
  says the audit reads launch files.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ecoguard import cli
from ecoguard.audit import audit_paths, audit_source
from ecoguard.audit.launch import audit_launch_text
from ecoguard.deployment import GpuSpec

# One probe's CPU budget in the child; before the fixes each took 34 s to more than 300 s.
CPU_BOUND_S = 10.0
# Peak memory of the child, the interpreter and ecoguard included (the YAML probe took 750 MB).
RSS_BOUND_MB = 400
PROBE_BYTES = 200_000

TRAP = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 1\n"


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def _rules(result) -> list[tuple[str, int | None, str]]:
    return [(Path(f.location.path).name, f.location.line, f.rule) for f in result.findings]


# -- 1. unexpected shapes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "service",
    [
        "image: [vllm/vllm-openai, latest]\n    command: --model x --max-num-seqs 1",
        "image: {name: vllm/vllm-openai}\n    command: --model x --max-num-seqs 1",
        "image: 42\n    command: [--model, {a: b}, [nested], --max-num-seqs, 1]",
        "image: null\n    entrypoint: {vllm: serve}\n    command: --max-num-seqs 1",
        "image: vllm/vllm-openai\n    command: {model: x}",
        "image: vllm/vllm-openai\n    command: !!binary aGVsbG8=",
    ],
)
def test_a_yaml_field_of_an_unexpected_shape_never_hides_other_files(tmp_path, service):
    (tmp_path / "compose.yaml").write_text(f"services:\n  llm:\n    {service}\n")
    (tmp_path / "serve.sh").write_text(TRAP)
    code, out, err = run_cli(["audit", str(tmp_path)])
    assert "Traceback" not in out + err
    assert code == 1, err  # the trap in serve.sh, nothing unreadable
    assert "serve.sh" in out and "batch-size-one" in out


def test_an_internal_failure_on_one_file_is_reported_for_that_file_only(tmp_path, monkeypatch):
    import ecoguard.audit.core as core

    def broken(*args, **kwargs):
        raise TypeError("a defect in the launch-file reader")

    monkeypatch.setattr(core, "audit_launch_text", broken)
    (tmp_path / "a.yaml").write_text("vllm: x\n")
    (tmp_path / "serve.py").write_text(
        "from transformers import AutoModelForCausalLM\n"
        'm = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", load_in_4bit=True)\n'
    )
    result = audit_paths([tmp_path])
    assert [f.rule for f in result.findings] == ["small-model-quant"]
    (problem,) = result.problems
    assert (Path(problem.path).name, problem.kind) == ("a.yaml", "unreadable")
    assert "TypeError" in problem.message and result.exit_code() == 2


# -- 2. every reader bounded by its input ---------------------------------------------------------


def _yaml_aliases(size: int, distinct_images: bool) -> str:
    """One anchored argument list used by every service (an alias per service)."""
    lines = ["x-args: &a"] + ["  - --max-num-seqs"] * 5000 + ["services:"]
    k = 0
    while sum(map(len, lines)) < size:
        tag = f":{k}" if distinct_images else ""
        lines.append(f"  s{k}:\n    image: vllm/vllm-openai{tag}\n    command: *a")
        k += 1
    return "\n".join(lines) + "\n"


def _dockerfile_escapes(size: int) -> str:
    """An exec-form CMD over many continued lines, its strings written with JSON escapes: each
    element was searched for, as written, in every line after it."""
    item = '"\\u0041", \\\n'
    count = size // len(item)
    return "FROM vllm/vllm-openai\nCMD [ \\\n" + item * count + '  "1"]\n'


def _python_step_loops(size: int, same_name: bool) -> str:
    """Many ``range(0, n, step)`` loops in one function (or in as many functions of one name),
    and many calls of it: each loop asked every call for ``step``."""
    head = [
        "from transformers import AutoModelForCausalLM",
        "model = AutoModelForCausalLM.from_pretrained('gpt2')",
    ]
    loop = "    for i in range(0, len(prompts), step):\n        model.generate(prompts[i])"
    count = size // (len(loop) + len("run(['a'], 1)") + 2 + (27 if same_name else 0))
    if same_name:
        body = [f"def run(prompts, step=1):\n{loop}" for _ in range(count)]
    else:
        body = ["def run(prompts, step=1):"] + [loop] * count
    calls = ["run(['a'], 1)"] * count
    return "\n".join(head + body + calls) + "\n"


def _shell_hostile(size: int) -> str:
    """A big variable read back many times, stray quotes of each kind, deep ${...} defaults."""
    value = "x" * 20_000
    parts = [f"A={value}\n"]
    line = "echo 'a\" $A $A $A $A ${B:-${C:-$A}} `x $'\\'' \"$A\" #$A\n"
    parts += [line] * ((size - len(value)) // len(line))
    return "".join(parts) + TRAP


PROBES = {
    "yaml-aliases-distinct-images": ("compose.yaml", lambda: _yaml_aliases(PROBE_BYTES, True)),
    "yaml-aliases-one-image": ("compose.yaml", lambda: _yaml_aliases(PROBE_BYTES, False)),
    "dockerfile-json-escapes": ("Dockerfile", lambda: _dockerfile_escapes(PROBE_BYTES)),
    "python-step-loops": ("serve.py", lambda: _python_step_loops(PROBE_BYTES, False)),
    "python-step-functions": ("serve.py", lambda: _python_step_loops(PROBE_BYTES, True)),
    "shell-expansions-and-quotes": ("serve.sh", lambda: _shell_hostile(PROBE_BYTES)),
}

_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from ecoguard.audit import audit_paths
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = audit_paths([sys.argv[1]])
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # VmHWM is this image's own peak; ru_maxrss keeps the forking parent's (pytest's) peak.
    try:
        with open("/proc/self/status") as status:
            peak = next(int(l.split()[1]) for l in status if l.startswith("VmHWM:"))
    except (OSError, StopIteration):
        peak = None  # not Linux: no per-image peak to read
    print(json.dumps({
        "cpu_s": cpu,
        "rss_mb": None if peak is None else peak / 1024,
        "findings": len(result.findings),
        "problems": [p.kind for p in result.problems],
    }))
    """
)


def audit_in_child(path: Path) -> dict:
    """Audit ``path`` in a child process; a hang fails the test at the timeout."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_each_reader_is_bounded_by_its_input(tmp_path, probe):
    name, build = PROBES[probe]
    text = build()
    assert len(text) >= PROBE_BYTES * 0.9
    path = tmp_path / name
    path.write_text(text)
    report = audit_in_child(path)
    assert report["cpu_s"] < CPU_BOUND_S, report
    assert report["rss_mb"] is None or report["rss_mb"] < RSS_BOUND_MB, report
    if probe == "yaml-aliases-distinct-images":
        # every alias read per service: past 4x the file, refused with a clear problem
        assert report["problems"] == ["too-large"]
    else:
        assert report["problems"] == [], report
    if probe.startswith(("python", "shell")):
        assert report["findings"] >= 1  # still audited, not given up on


def test_yaml_alias_refusal_says_what_and_why(tmp_path):
    (tmp_path / "compose.yaml").write_text(_yaml_aliases(100_000, True))
    result = audit_paths([tmp_path])
    (problem,) = result.problems
    assert problem.kind == "too-large" and "aliases expand" in problem.message


def test_services_sharing_one_anchored_command_are_read_once():
    text = "x: &cmd [--model, Qwen/Qwen2.5-7B-Instruct, --max-num-seqs, '1']\nservices:\n"
    text += "".join(f"  s{k}:\n    image: vllm/vllm-openai\n    command: *cmd\n" for k in range(50))
    result = audit_launch_text(text, "compose.yaml", GpuSpec())
    assert [f.rule for f in result.findings] == ["batch-size-one"]  # not 50 copies
    assert not result.problems


# -- 3. the CLI's whole-run time limit -------------------------------------------------------


def test_cli_time_limit_stops_the_run_and_keeps_what_was_found(tmp_path, monkeypatch):
    import ecoguard.audit.core as core

    clock = {"now": 1000.0}
    monkeypatch.setattr(core.time, "monotonic", lambda: clock["now"])
    real_read = core.read_source

    def read(source):
        if "b_slow" in source.display:
            clock["now"] += 3600.0  # this file takes an hour
        return real_read(source)

    monkeypatch.setattr(core, "read_source", read)
    trap = (
        "from transformers import AutoModelForCausalLM\n"
        'm = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", load_in_4bit=True)\n'
    )
    for name in ("a_first.py", "b_slow.py", "c_never.py"):
        (tmp_path / name).write_text(trap)
    code, out, err = run_cli(["audit", "--time-limit", "60", "--json", str(tmp_path)])
    assert code == 2
    report = json.loads(out)
    assert [Path(f["location"]["path"]).name for f in report["findings"]] == ["a_first.py"]
    (error,) = report["errors"]
    assert (Path(error["path"]).name, error["kind"]) == ("b_slow.py", "time-limit")
    assert "60 s limit" in error["message"] and "1 more file(s) not read" in error["message"]
    assert "time-limit" in err
    # 0: no limit; the same tree is then audited whole
    assert run_cli(["audit", "--time-limit", "0", str(tmp_path)])[0] == 1


def test_cli_time_limit_has_a_default_and_refuses_nonsense(tmp_path):
    from ecoguard.audit.cli import DEFAULT_TIME_LIMIT_S

    assert 0 < DEFAULT_TIME_LIMIT_S <= 600
    (tmp_path / "x.py").write_text("x = 1\n")
    for bad in ("-1", "nan", "inf", "soon"):
        code, _, err = run_cli(["audit", "--time-limit", bad, str(tmp_path)])
        assert code == 2 and "time-limit" in err and "Traceback" not in err


# -- 4. valid syntax that hid a trap ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("Dockerfile", 'FROM\tvllm/vllm-openai\nCMD\t["--model", "m", "--max-num-seqs", "1"]\n', 2),
        (
            "Dockerfile",
            '# escape=`\nFROM vllm/vllm-openai\nCMD ["--model", "Qwen/Qwen2.5-7B-Instruct", `\n'
            '     "--max-num-seqs", "1"]\n',
            4,
        ),
        ("serve.sh", "vllm serve Qwen/Qwen2.5-7B-Instruct $'--max-num-seqs' $'\\x31'\n", 1),
        (
            "serve.sh",
            "vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name a#b --max-num-seqs 1\n",
            1,
        ),
        ("serve.sh", "vllm serve Qwen/Qwen2.5-7B-Instruct 2>&1 --max-num-seqs 1 | tee log\n", 1),
    ],
    ids=["tab-after-keyword", "escape-directive", "ansi-c-quoting", "hash-in-word", "redirect"],
)
def test_valid_docker_and_bash_syntax_does_not_hide_a_trap(name, text, line):
    result = audit_launch_text(text, name, GpuSpec())
    assert [(f.location.line, f.rule) for f in result.findings] == [(line, "batch-size-one")]


# -- 5. shell variables in launch files (issue 33) --------------------------------------------


@pytest.mark.parametrize(
    "assignment",
    [
        "MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct-AWQ}",
        "MODEL=${MODEL-Qwen/Qwen2.5-0.5B-Instruct-AWQ}",
        "export MODEL=Qwen/Qwen2.5-0.5B-Instruct-AWQ",
        'MODEL="Qwen/Qwen2.5-0.5B-Instruct-AWQ"',
        ": ${MODEL:=Qwen/Qwen2.5-0.5B-Instruct-AWQ}",
    ],
)
def test_shell_variables_name_the_model(assignment):
    text = (
        f'#!/bin/sh\n{assignment}\necho "starting $MODEL"\nvllm serve "$MODEL" --quantization awq\n'
    )
    result = audit_launch_text(text, "serve.sh", GpuSpec())
    assert [(f.location.line, f.rule) for f in result.findings] == [(4, "small-model-quant")]
    assert "0.5B" in result.findings[0].message or "0.5" in result.findings[0].message


def test_shell_variables_follow_bash_rules():
    # A prefix assignment is the command's environment, not the shell's: $MODEL is unknown.
    text = "MODEL=Qwen/Qwen2.5-0.5B-Instruct-AWQ vllm serve $MODEL --quantization awq\n"
    assert audit_launch_text(text, "serve.sh", GpuSpec()).findings == []
    # Single quotes do not expand; a default inside ${...:-...} does; $ARGS splits into words.
    text = "ARGS='--max-num-seqs 1'\nvllm serve ${MODEL:-Qwen/Qwen2.5-7B-Instruct} $ARGS\n"
    result = audit_launch_text(text, "serve.sh", GpuSpec())
    assert [(f.location.line, f.rule) for f in result.findings] == [(2, "batch-size-one")]


def test_dockerfile_env_reaches_a_shell_form_command():
    text = (
        "FROM python:3.11\nARG SEQS=1\nENV MODEL=Qwen/Qwen2.5-7B-Instruct NUM=${SEQS}\n"
        "CMD vllm serve $MODEL --max-num-seqs $NUM\n"
    )
    result = audit_launch_text(text, "Dockerfile", GpuSpec())
    assert [(f.location.line, f.rule) for f in result.findings] == [(4, "batch-size-one")]


def test_the_sample_launch_script_with_a_default_model_is_judged(tmp_path):
    script = Path(__file__).resolve().parents[1] / "engines" / "launch" / "serve.sh"
    text = script.read_text().replace(
        "exec vllm serve Qwen/Qwen2.5-0.5B-Instruct-AWQ", 'exec vllm serve "$MODEL"'
    )
    assert '"$MODEL"' in text
    result = audit_launch_text(text, "serve.sh", GpuSpec())
    assert {f.rule for f in result.findings} == {"small-model-quant", "batch-size-one"}


# -- 6. fixes in the user's names; help ---------------------------------------------------------


def test_fixes_name_what_the_file_names(tmp_path):
    source = textwrap.dedent(
        """\
        from transformers import AutoModelForCausalLM, AutoTokenizer
        repo = "Qwen/Qwen2.5-0.5B-Instruct"
        tok = AutoTokenizer.from_pretrained(repo)
        llm = AutoModelForCausalLM.from_pretrained(repo, load_in_4bit=True)
        questions = ["q"] * 100
        for q in questions:
            enc = tok(q, return_tensors="pt")
            out = llm.generate(**enc, max_new_tokens=64)
        """
    )
    (tmp_path / "serve.py").write_text(source)
    result = audit_paths([tmp_path])
    fixes = {f.rule: f.fix for f in result.findings}
    assert set(fixes) == {"small-model-quant", "batch-size-one"}
    assert fixes["small-model-quant"].startswith("AutoModelForCausalLM.from_pretrained(repo, ")
    assert "len(questions)" in fixes["batch-size-one"]
    assert "llm.generate(**tok(questions[" in fixes["batch-size-one"]
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))
    allowed = {"for", "i", "in", "range", "len", "return_tensors", "pt", "padding", "True"}
    for fix in fixes.values():
        code = re.sub(r'"[^"]*"', "", fix.split("#", 1)[0])  # string literals aside
        used = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))
        assert used <= names | allowed | {"dtype", "torch", "bfloat16", "float16"}, used - names


def test_fix_with_no_name_in_the_file_uses_a_marked_slot():
    source = (
        "from transformers import AutoModelForCausalLM\n"
        "m = AutoModelForCausalLM.from_pretrained('gpt2')\n"
        "for i in range(100):\n"
        "    m.generate(input_ids=[[i]])\n"
    )
    (finding,) = audit_source(source).findings
    assert "<prompts>" in finding.fix and "<tokenizer>" in finding.fix
    assert "m.generate(" in finding.fix


def test_top_level_help_says_the_audit_reads_launch_files(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    entry = re.search(r"\n    audit\s+(.*?)\n    \S", out, re.DOTALL)
    assert entry is not None, out
    text = " ".join(entry.group(1).split())
    assert "Python" in text and "Dockerfile" in text and "Kubernetes" in text


def test_kv_cache_note_names_the_files_own_object():
    source = (
        "from transformers import AutoModelForCausalLM\n"
        'llm = AutoModelForCausalLM.from_pretrained("gpt2")\n'
        "llm.config.use_cache = False\n"
    )
    (note,) = audit_source(source).notes
    assert note.fix.startswith("llm.config.use_cache = True")


def test_compose_defaults_name_the_model_in_lists_and_strings():
    text = (
        "services:\n"
        "  a:\n"
        "    image: vllm/vllm-openai:v0.9\n"
        '    command: ["--model", "${MODEL:-Qwen/Qwen2.5-0.5B-Instruct-AWQ}", "--quantization", "awq"]\n'
        "  b:\n"
        "    image: vllm/vllm-openai:v0.9\n"
        "    command: --model ${M2-Qwen/Qwen2.5-0.5B-Instruct-AWQ} --quantization awq\n"
    )
    result = audit_launch_text(text, "compose.yaml", GpuSpec())
    assert [(f.location.line, f.rule) for f in result.findings] == [
        (4, "small-model-quant"),
        (7, "small-model-quant"),
    ]
