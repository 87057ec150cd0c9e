"""The lobster alert in its three formats."""

from __future__ import annotations

import json

import pytest

from ecoguard.config import Settings
from ecoguard.deployment import Deployment, ModelSpec
from ecoguard.findings import Finding, Impact, Mood
from ecoguard.voice import COOL_DOWN, SHELL, render_alert

FINDING = Finding(
    rule="int8-mixed",
    mood=Mood.ORANGE,
    title="INT8 mixed-precision trap",
    message="One sentence of why.",
    fix="BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)",
    impact=Impact(
        extra_energy_pct=52.8,
        extra_usd_per_month=32.35,
        monthly_requests=1_000_000,
        tier="measured",
    ),
    changes_outputs=True,
)
DEPLOYMENT = Deployment(
    model=ModelSpec(id="mistral-7b", params_b=7.24), precision="int8_mixed", batch_size=1
)


def test_lobster_format_has_every_part():
    text = render_alert(
        FINDING,
        deployment=DEPLOYMENT,
        changed="threshold 6 -> 0",
        action="fix",
        settings=Settings(price_usd_per_kwh=0.12),
    )
    assert text.startswith("[ORANGE]")
    for part in (
        SHELL[Mood.ORANGE],
        "INT8 mixed-precision trap",
        "mistral-7b",
        "7.24B params",
        "One sentence of why.",
        "+53% energy",
        "$32.35/month",
        "1,000,000 requests/month",
        "$0.12/kWh",
        "[measured]",
        "llm_int8_threshold=0.0",
        "threshold 6 -> 0",
        "outputs may change",
        COOL_DOWN[Mood.ORANGE],
    ):
        assert part in text, part


def test_json_format_is_one_object():
    record = json.loads(render_alert(FINDING, deployment=DEPLOYMENT, log_format="json"))
    assert record["rule"] == "int8-mixed" and record["mood"] == "orange"
    assert record["impact"]["extra_energy_pct"] == 52.8
    assert record["config"].startswith("mistral-7b")
    assert "\n" not in render_alert(FINDING, log_format="json")


def test_plain_format_is_one_line():
    text = render_alert(FINDING, settings=Settings(log_format="plain"))
    assert "\n" not in text and "rule=int8-mixed" in text and "mood=orange" in text


@pytest.mark.parametrize("mood", list(Mood))
def test_every_mood_renders(mood):
    text = render_alert(Finding(rule="x", mood=mood, title="T", message="m", fix="f"))
    assert text.startswith(f"[{mood.value.upper()}]") and COOL_DOWN[mood] in text
