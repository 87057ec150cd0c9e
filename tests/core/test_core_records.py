from __future__ import annotations

import subprocess
import sys

import pytest

from ecoguard.config import Settings, parse_rule_overrides
from ecoguard.deployment import PRECISIONS, Deployment, ModelSpec, normalize_precision
from ecoguard.errors import UsageError
from ecoguard.findings import Finding, Mood


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("int8_default", "int8_mixed"),
        ("INT8", "int8_mixed"),
        ("load_in_8bit", "int8_mixed"),
        ("4bit", "nf4"),
        ("4-bit", "nf4"),
        ("fp8", "fp8_weight_only"),
        ("half", "fp16"),
        ("bfloat16", "bf16"),
        ("int8 pure", "int8_pure"),
        ("nf4_dq", "nf4_dq"),
    ],
)
def test_precision_aliases(typed, canonical):
    assert normalize_precision(typed) == canonical


def test_every_canonical_precision_maps_to_itself():
    assert [normalize_precision(p) for p in PRECISIONS] == list(PRECISIONS)


def test_unknown_precision_lists_accepted_values():
    with pytest.raises(UsageError, match="accepted: fp32, fp16"):
        normalize_precision("int3")


@pytest.mark.parametrize(
    "bad",
    [
        {"batch_size": 0},
        {"batch_size": -4},
        {"batch_size": True},
        {"generation_tokens": 0},
        {"precision": "int3"},
        {"use": "gaming"},
        {"model": ModelSpec(params_b=-1.0)},
    ],
)
def test_deployment_validation_rejects_out_of_range(bad):
    with pytest.raises(UsageError):
        Deployment(**bad).validate()


def test_settings_from_env_parses_overrides():
    s = Settings.from_env(
        {"ECOGUARD_MODE": "fix", "ECOGUARD_RULES": "int8-mixed:strict, batch-size-one:off"}
    )
    assert s.mode == "fix"
    assert s.action_for("int8-mixed") == "strict"
    assert s.action_for("batch-size-one") == "off"
    assert s.action_for("fp8-eager") == "fix"


@pytest.mark.parametrize(
    "env",
    [
        {"ECOGUARD_MODE": "loud"},
        {"ECOGUARD_RULES": "int8-mixed"},
        {"ECOGUARD_RULES": "int8-mixed:shout"},
        {"ECOGUARD_SAMPLE_HZ": "fast"},
        {"ECOGUARD_METRICS_PORT": "70000"},
    ],
)
def test_settings_from_env_rejects_bad_values(env):
    with pytest.raises(UsageError):
        Settings.from_env(env)


def test_rule_override_parser_ignores_blank_parts():
    assert parse_rule_overrides("a:off,,b:warn ") == {"a": "off", "b": "warn"}


def test_mood_order_and_worst():
    assert Mood.worst(["green", "orange", "yellow"]) is Mood.ORANGE
    assert Mood.worst([]) is Mood.GREEN
    assert Mood.RED.rank > Mood.ORANGE.rank > Mood.YELLOW.rank > Mood.GREEN.rank > Mood.GRAY.rank


def test_finding_to_dict_round_trips_fields():
    f = Finding(rule="int8-mixed", mood=Mood.ORANGE, title="t", message="m", fix="x")
    d = f.to_dict()
    assert d["rule"] == "int8-mixed" and d["mood"] == "orange" and "location" not in d


def test_import_ecoguard_is_inert():
    code = (
        "import sys, threading, ecoguard\n"
        "heavy = [m for m in ('torch','transformers','pynvml','prometheus_client','wrapt') "
        "if m in sys.modules]\n"
        "threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]\n"
        "assert not heavy, heavy\n"
        "assert not threads, threads\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("word", ["off", "OFF", "none", "0"])
def test_ledger_off_as_an_argument_disables_the_ledger_like_the_env_var(word):
    assert Settings.from_env({}, ledger_path=word).ledger_path is None
    assert Settings.from_env({"ECOGUARD_LEDGER": word}).ledger_path is None


def test_ledger_path_argument_is_a_path():
    from pathlib import Path

    assert Settings.from_env({}, ledger_path="/tmp/x.sqlite").ledger_path == Path("/tmp/x.sqlite")
