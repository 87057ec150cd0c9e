"""Every CLI subcommand and every ECOGUARD_* variable fed hostile values (issue 21): empty, NaN,
infinities, negatives, huge numbers, terminal escapes, bidi controls, undecodable bytes.

The property: the command exits 0, 1 or 2; 2 comes with a one-line ``ecoguard: error:`` message;
nothing ever ends in a traceback; ``--json`` output is always strict JSON (no NaN/Infinity);
no terminal escape or bidi control is echoed raw; every line written encodes as UTF-8. At
``import ecoguard.auto`` a bad variable is a warning and the documented default, never an
exception in the user's import.

Commands run in-process through ``ecoguard.cli.main`` (a subprocess only for ``import
ecoguard.auto``); ``bench`` and ``demo`` stop where their heavy run would start, so only their
argument handling is exercised.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ecoguard import cli
from ecoguard.config import _ENV_FIELDS, Settings

HOSTILE: tuple[str, ...] = (
    "",
    "   ",
    "nan",
    "inf",
    "-inf",
    "-1",
    "0",
    "1e400",
    "99999999999999999999",
    "\x1b[31mred\x1b[0m",
    "a\u202eb",  # right-to-left override
    "x\udcffy",  # an undecodable byte, as the OS hands it over (surrogate escape)
    "line\nbreak",
    "A" * 5000,
)
ESCAPES = ("\x1b", "\u202e")


class ReachedHeavyRun(Exception):
    """Raised by the stubs standing in for bench's and demo's measurement runs."""


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A clean environment, a throwaway working directory and ledger, and the heavy runs
    stubbed out."""
    for name in list(__import__("os").environ):
        if name.startswith("ECOGUARD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ECOGUARD_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("ECOGUARD_LOCAL_DATA", str(tmp_path / "local_rows.jsonl"))
    monkeypatch.chdir(tmp_path)

    def stub(*args, **kwargs):
        raise ReachedHeavyRun

    import ecoguard.bench.runner
    import ecoguard.demo.phases

    monkeypatch.setattr(ecoguard.bench.runner, "run_bench", stub)
    monkeypatch.setattr(ecoguard.demo.phases, "_run", stub)
    (tmp_path / "serve.py").write_text("x = 1\n")
    return tmp_path


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        try:
            code = cli.main(argv)
        except ReachedHeavyRun:
            code = 0  # the arguments were accepted
    return code, out.getvalue(), err.getvalue()


def _reject_constant(name: str) -> None:
    raise ValueError(f"not JSON: {name}")


def check_outcome(argv: list[str], code: int, out: str, err: str) -> None:
    where = f"ecoguard {' '.join(repr(a) if len(a) < 80 else repr(a[:60]) + '...' for a in argv)}"
    assert code in (0, 1, 2), f"{where}: exit {code}"
    assert "Traceback" not in err and "Traceback" not in out, f"{where}:\n{err[:3000]}"
    if code == 2:  # a usage error (or, for audit, a path it could not read), said on stderr
        assert err.startswith("ecoguard"), f"{where}: {err[:500]!r}"
    for stream in (out, err):
        stream.encode("utf-8")  # no lone surrogate reaches a terminal or a file
        for escape in ESCAPES:
            assert escape not in stream, f"{where}: echoed {escape!r} raw"
    if code == 0 and "--json" in argv and out.strip():
        json.loads(out, parse_constant=_reject_constant)


# Each command: a valid base command line and the options that take a value. A hostile value
# replaces the option's value (or is appended when the base line lacks the option).
COMMANDS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "optimize": (
        ["optimize", "--model", "7B", "--gpu", "t4", "--json"],
        (
            "--model",
            "--gpu",
            "--precision",
            "--batch-size",
            "--prompt-tokens",
            "--generation-tokens",
            "--requests-per-month",
            "--region",
            "--use",
            "--language",
        ),
    ),
    "compare": (["compare", "--model", "7B", "--gpu", "t4", "--json"], ("--model", "--precision")),
    "diagnose": (
        ["diagnose", "--model", "7B", "--gpu", "a800", "--json"],
        ("--throughput", "--power", "--energy-per-1k", "--gpu", "--batch-size", "--region"),
    ),
    "estimate": (
        ["estimate", "--model", "7B", "--gpu", "t4", "--json"],
        (
            "--model",
            "--params-b",
            "--gpu",
            "--precision",
            "--batch-size",
            "--prompt-tokens",
            "--generation-tokens",
            "--requests-per-month",
            "--region",
        ),
    ),
    "data": (["data", "--rows", "--json"], ("--gpu", "--model", "--precision", "--tier")),
    "audit": (
        ["audit", "serve.py", "--json"],
        ("--gpu", "--exclude", "--severity", "--format", "--output"),
    ),
    "report": (["report", "--json"], ("--since", "--by", "--ledger")),
    "exporter": (
        ["exporter", "--once", "--backend", "null", "--port", "0"],
        ("--port", "--addr", "--sample-hz", "--multiproc-dir", "--backend"),
    ),
    "demo": (
        ["demo", "--quick", "--json"],
        ("--mode", "--metrics-port", "--backend", "--ledger", "--monthly-requests", "--region"),
    ),
    "bench": (
        ["bench", "--model", "some-model", "--no-save", "--json"],
        (
            "--model",
            "--precisions",
            "--batch-sizes",
            "--prompt-tokens",
            "--generation-tokens",
            "--runs",
            "--warmup",
            "--cooldown-s",
            "--idle-s",
            "--cv-bound",
            "--out",
            "--simulated-gpu",
        ),
    ),
    "mcp": (["mcp"], ("--log-level",)),
}


def _with(base: list[str], option: str, value: str) -> list[str]:
    argv = list(base)
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += [option, value]
    return argv


def _value_arg(option: str, value: str) -> list[str]:
    # "--opt=value" keeps a value starting with "-" from being read as an option
    return [f"{option}={value}"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_of_every_command_refuses_hostile_values_cleanly(sandbox, command):
    base, options = COMMANDS[command]
    for option in options:
        for value in HOSTILE:
            argv = [a for a in _with(base, option, "PLACEHOLDER") if a != "PLACEHOLDER"]
            position = argv.index(option)
            argv[position : position + 1] = _value_arg(option, value)
            if command == "mcp" and value in ("WARNING", "INFO"):
                continue  # a valid level would start the server on this test's stdin
            code, out, err = run(argv)
            check_outcome(argv, code, out, err)


@pytest.mark.parametrize(
    "argv_for",
    [
        lambda v: ["advise", v, "--json"],
        lambda v: ["advise", f"energy of Qwen2.5-7B on a T4 at batch size {v}", "--json"],
        lambda v: ["audit", v, "--json"],
        lambda v: ["audit", "serve.py", v],
    ],
    ids=["advise-text", "advise-batch", "audit-path", "audit-second-path"],
)
def test_positional_arguments_refuse_hostile_values_cleanly(sandbox, argv_for):
    for value in HOSTILE:
        argv = argv_for(value)
        code, out, err = run(argv)
        check_outcome(argv, code, out, err)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["diagnose", "--model", "7B", "--power=-1"], "--power must be above 0"),
        (["diagnose", "--model", "7B", "--power", "nan", "--json"], "finite number"),
        (["diagnose", "--model", "7B", "--power", "inf", "--json"], "finite number"),
        (["estimate", "--model", "", "--gpu", "t4"], "empty --model"),
        (["optimize", "--model", "7B", "--region", ""], "empty --region"),
        (["report", "--since", ""], "empty --since"),
        (["report", "--since", "0001-01-01"], "--since"),
        (["report", "--since", "99999999999999999999d"], "before 1970-01-02"),
        (["audit", ""], "empty PATH"),
        (["optimize", "--model", "Qwen\x1b[31m7B"], "control or bidi character (U+001B)"),
        (["optimize", "--model", "Qwen\u202e7B"], "control or bidi character (U+202E)"),
        (["bench", "--model", "m", "--out", "."], "is a directory"),
        (["exporter", "--once", "--addr", "no-such-host.invalid"], "not an address"),
        (["exporter", "--once", "--addr", "a\udcffb"], "undecodable byte"),
        (["advise", "Qwen2.5-7B on a T4 at batch size 0"], "batch size 0"),
        (["advise", "Qwen2.5-7B on a T4 at batch size -1"], "batch size -1"),
        (["advise", "Qwen2.5-7B on a T4 at batch size 1e12"], "batch size 1e12"),
    ],
)
def test_each_reported_bad_input_is_a_usage_error_with_a_clear_message(sandbox, argv, message):
    code, out, err = run(argv)
    assert code == 2, (argv, out, err)
    assert message in err, err
    check_outcome(argv, code, out, err)


def test_exporter_nvml_without_a_driver_is_a_clear_failed_check(sandbox, monkeypatch):
    from ecoguard.errors import BackendError

    def no_driver(settings):
        raise BackendError("NVML nvmlInit: NVML Shared Library Not Found")

    import ecoguard.energy

    monkeypatch.setattr(ecoguard.energy, "start_meter", no_driver)
    code, _, err = run(["exporter", "--backend", "nvml", "--once"])
    assert code == 1
    assert "nvml power backend is not available" in err and "--backend simulated" in err
    assert "Traceback" not in err


# -- ECOGUARD_* variables ------------------------------------------------------------------------

ENV_NAMES = sorted("ECOGUARD_" + suffix for suffix in _ENV_FIELDS)
ENV_HOSTILE = (*(v for v in HOSTILE if v.strip()), "1e6x", "2", "-0")


@pytest.mark.parametrize("name", ENV_NAMES)
def test_every_variable_with_hostile_values_is_exit_2_or_accepted_in_the_cli(
    sandbox, monkeypatch, name
):
    for value in ENV_HOSTILE:
        monkeypatch.setenv(name, value)
        for argv in (["estimate", "--model", "7B", "--gpu", "t4", "--json"], ["report", "--json"]):
            code, out, err = run(argv)
            check_outcome(argv, code, out, err)
            if code == 2:  # the message names the variable (or the ledger file it names)
                assert name in err or (name == "ECOGUARD_LEDGER" and value[:40] in err), (
                    f"{name}={value[:40]!r}: the message does not name the variable: {err[:300]}"
                )


@pytest.mark.parametrize("name", ENV_NAMES)
def test_every_variable_at_auto_import_warns_and_keeps_the_default(monkeypatch, name):
    """What ``import ecoguard.auto`` reads: never an exception; a bad value is a warning and
    the field keeps its documented default."""
    defaults = Settings()
    field = _ENV_FIELDS[name.removeprefix("ECOGUARD_")]
    for value in ENV_HOSTILE:
        env = (
            {name: value, "ECOGUARD_LEDGER": "off"} if name != "ECOGUARD_LEDGER" else {name: value}
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            settings = Settings.from_env(env, on_bad_value="warn")
        if caught:
            assert name in str(caught[0].message)
            assert getattr(settings, field) == getattr(defaults, field) or field == "ledger_path"
        else:  # accepted: then the strict reading accepts it too
            assert Settings.from_env(env) == settings
        for number in (settings.pue, settings.price_usd_per_kwh, settings.grid_gco2_per_kwh):
            assert number is None or (math.isfinite(number) and number > 0)


def test_import_ecoguard_auto_survives_every_variable_bad_at_once(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ECOGUARD_LEDGER": str(tmp_path / "ledger.sqlite"),
    }
    env.update({name: "inf" for name in ENV_NAMES if name != "ECOGUARD_LEDGER"})
    env["ECOGUARD_REGION"] = "atlantis"
    proc = subprocess.run(
        [sys.executable, "-c", "import ecoguard.auto as a; print(a.settings.monthly_requests)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(Path(__file__).resolve().parents[2]),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(Settings().monthly_requests)
    assert "Traceback" not in proc.stderr
    for name in ("ECOGUARD_MONTHLY_REQUESTS", "ECOGUARD_PUE", "ECOGUARD_REGION"):
        assert f"ignoring {name}" in proc.stderr
