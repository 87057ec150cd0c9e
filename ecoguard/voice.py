"""The EcoLobster's voice: one way to render a finding as an alert, for every front door.

Three formats (``Settings.log_format`` / ``ECOGUARD_LOG_FORMAT``):

- ``lobster`` (default): a short multi-line alert with the mood tag, the shell colour, the alert
  name, the configuration, one sentence of why, the cost (extra % energy and ~$/month at a stated
  volume and price, with its data tier), the quick fix, what was changed (fix mode) and a
  cool-down line.
- ``plain``: one line of ``key=value`` pairs without the character, for grep and log search.
- ``json``: one JSON object per alert, for log pipelines.

The advisor's answers speak in the same voice: the mood tag, one lobster line per mood and
language, and terminal colours (only on a TTY, and never with ``NO_COLOR``) live here too, so an
alert and an answer look alike.

Pure string work: no torch, no I/O.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.findings import Finding, Mood
from ecoguard.knowledge import region

# How the lobster's shell looks in each mood, and what it says once the fix is in.
SHELL: dict[Mood, str] = {
    Mood.GREEN: "shell a calm green",
    Mood.YELLOW: "shell warming to yellow",
    Mood.ORANGE: "shell glowing orange",
    Mood.RED: "shell boiling red",
    Mood.GRAY: "shell a puzzled gray",
}

COOL_DOWN: dict[Mood, str] = {
    Mood.GREEN: "Water's cool. Carry on.",
    Mood.YELLOW: "Apply the fix and I sink back into cool water.",
    Mood.ORANGE: "One line of change and my shell fades back to green.",
    Mood.RED: "Take me off the stove: apply the fix and the GPU stops cooking both of us.",
    Mood.GRAY: "Back on a stable release, the numbers mean something again.",
}

# The mood tag that opens an alert and an answer alike.
MOOD_TAGS: dict[Mood, str] = {mood: f"[{mood.value.upper()}]" for mood in Mood}

_ANSI: dict[Mood, str] = {
    Mood.GREEN: "\033[32m",
    Mood.YELLOW: "\033[33m",
    Mood.ORANGE: "\033[38;5;208m",
    Mood.RED: "\033[31m",
    Mood.GRAY: "\033[90m",
}
_RESET = "\033[0m"

# The lobster's one line atop an answer, per language and mood.
LOBSTER_LINES: dict[str, dict[Mood, str]] = {
    "en": {
        Mood.GREEN: "EcoLobster waves a calm claw: this setup sips power. Here is the proof.",
        Mood.YELLOW: "EcoLobster tilts its antennae: it works, but joules are slipping through the net.",
        Mood.ORANGE: "EcoLobster snaps a claw: energy trap ahead. The data shows where the joules go.",
        Mood.RED: "EcoLobster turns boiling red: this setup burns power for nothing. Fix it first.",
        Mood.GRAY: "EcoLobster squints into murky water: the reference data does not reach this far.",
    },
    "zh": {
        Mood.GREEN: "节能龙虾挥挥钳子：这个配置很省电，数据如下。",
        Mood.YELLOW: "节能龙虾动了动触须：能跑，但有电在悄悄溜走。",
        Mood.ORANGE: "节能龙虾夹了一下：前方有能耗陷阱，数据告诉你电花在哪儿。",
        Mood.RED: "节能龙虾急得通红：这个配置在白白烧电，先修它。",
        Mood.GRAY: "节能龙虾眯眼看浑水：参考数据覆盖不到这里。",
    },
}


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 token``, ``2 tokens``, ``0 tokens`` (``many``: an irregular plural)."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"


def describe_deployment(deployment: Deployment | None) -> str:
    """A compact one-line description: model, GPU, precision, batch size."""
    if deployment is None:
        return "unknown configuration"
    parts: list[str] = []
    model = deployment.model
    if model.id:
        parts.append(model.id)
    if model.params_b is not None:
        size = model.params_b
        parts.append(f"{size:.3g}B params" if size >= 0.1 else f"{size * 1000:.3g}M params")
    gpu = deployment.gpu
    gpu_name = gpu.name or gpu.profile
    parts.append(gpu_name if gpu_name else "no GPU known")
    precision = deployment.precision or deployment.dtype
    if precision:
        parts.append(precision)
    if deployment.quant.int8_threshold is not None:
        parts.append(f"llm_int8_threshold={deployment.quant.int8_threshold:g}")
    if deployment.batch_size is not None:
        parts.append(f"batch {deployment.batch_size}")
    return " | ".join(parts)


def _price(settings: Settings) -> float | None:
    if settings.price_usd_per_kwh is not None:
        return settings.price_usd_per_kwh
    try:
        return region(settings.region).price_usd_per_kwh
    except Exception:  # knowledge tables absent or unknown region: state no price
        return None


def cost_line(finding: Finding, settings: Settings) -> str:
    """``+X% energy ≈ $Y/month extra at N requests/month ($P/kWh) [tier]`` or a plain
    statement that no estimate backs the alert."""
    impact = finding.impact
    if impact is None or impact.extra_energy_pct is None:
        return "no reference figure covers this configuration, so the cost is not estimated"
    text = f"{impact.extra_energy_pct:+.0f}% energy"
    if impact.paired_range_pct is not None and impact.paired_sessions >= 2:
        low, high = impact.paired_range_pct
        text += f" ({low:+.0f}% to {high:+.0f}% in {impact.paired_sessions} same-session pairs)"
    if impact.extra_usd_per_month is not None:
        volume = impact.monthly_requests or settings.monthly_requests
        text += f" ≈ ${impact.extra_usd_per_month:,.2f}/month extra at {volume:,} requests/month"
        price = _price(settings)
        if price is not None:
            text += f" (${price:g}/kWh, {settings.region})"
    text += f" [{impact.tier}]"
    return text


def alert_record(
    finding: Finding,
    *,
    action: str = "warn",
    deployment: Deployment | None = None,
    changed: str | None = None,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """The alert as a JSON-ready dict (the ``json`` format, and what the others render)."""
    settings = settings or Settings()
    record = finding.to_dict()
    record.update(
        {
            "alert": finding.title,
            "action": action,
            "config": describe_deployment(deployment),
            "cost": cost_line(finding, settings),
            "changed": changed,
        }
    )
    return record


def render_alert(
    finding: Finding,
    *,
    action: str = "warn",
    deployment: Deployment | None = None,
    changed: str | None = None,
    settings: Settings | None = None,
    log_format: str | None = None,
) -> str:
    """The alert text in ``log_format`` (default: the settings' format).

    ``changed`` is what a fix did (fix mode); ``action`` is warn/fix/strict."""
    settings = settings or Settings()
    fmt = log_format or settings.log_format
    if fmt == "json":
        return json.dumps(
            alert_record(
                finding, action=action, deployment=deployment, changed=changed, settings=settings
            ),
            default=str,
            ensure_ascii=False,
        )
    config = describe_deployment(deployment)
    cost = cost_line(finding, settings)
    if fmt == "plain":
        fields = [
            f"rule={finding.rule}",
            f"mood={finding.mood.value}",
            f"action={action}",
            f"config={config!r}",
            f"why={finding.message!r}",
            f"cost={cost!r}",
            f"fix={finding.fix!r}",
        ]
        if changed:
            fields.append(f"changed={changed!r}")
        if finding.changes_outputs:
            fields.append("outputs_may_change=true")
        return "ecoguard " + " ".join(fields)
    mood = finding.mood
    lines = [
        f"{mood_tag(mood)} EcoLobster, {SHELL[mood]}: {finding.title} ({finding.rule})",
        f"  config : {config}",
        f"  why    : {finding.message}",
        f"  cost   : {cost}",
        f"  fix    : {finding.fix}",
    ]
    if changed:
        note = " (model outputs may change)" if finding.changes_outputs else ""
        lines.append(f"  changed: {changed}{note}")
    elif action == "strict":
        lines.append("  refused: strict mode stops here until the fix is applied")
    elif finding.changes_outputs:
        lines.append("  note   : this fix may change model outputs slightly; check your evals")
    lines.append(f"  {COOL_DOWN[mood]}")
    return "\n".join(lines)


def mood_tag(mood: Mood) -> str:
    """``[ORANGE]``: the tag an alert and an answer open with."""
    return MOOD_TAGS[mood]


def lobster_line(mood: Mood, language: str) -> str:
    """The lobster's line for an answer in ``language`` (English when it has none)."""
    return LOBSTER_LINES.get(language, LOBSTER_LINES["en"])[mood]


def use_color(stream: TextIO | None = None, environ: dict[str, str] | None = None) -> bool:
    """Colours only on a terminal and only when NO_COLOR is unset (https://no-color.org)."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR", "") != "":
        return False
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def colorize(text: str, mood: Mood, enabled: bool) -> str:
    return f"{_ANSI[mood]}{text}{_RESET}" if enabled else text
