"""The EcoLobster's voice for advisor answers: mood tags, one line per mood and language, colours.

Alert rendering for the guard lives elsewhere (``ecoguard.voice`` when present); when it exists
its mood tags and colours are reused so an alert and an answer look alike. The lines below are
the advisor's own.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from ecoguard.findings import Mood

_TAGS: dict[Mood, str] = {
    Mood.GREEN: "[GREEN]",
    Mood.YELLOW: "[YELLOW]",
    Mood.ORANGE: "[ORANGE]",
    Mood.RED: "[RED]",
    Mood.GRAY: "[GRAY]",
}
_ANSI: dict[Mood, str] = {
    Mood.GREEN: "\033[32m",
    Mood.YELLOW: "\033[33m",
    Mood.ORANGE: "\033[38;5;208m",
    Mood.RED: "\033[31m",
    Mood.GRAY: "\033[90m",
}
_RESET = "\033[0m"

# One line per mood and language, keyed by protocol where the situation differs.
_LINES: dict[str, dict[Mood, str]] = {
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


def _shared_voice() -> object | None:
    """``ecoguard.voice`` (the alert renderer) if it exists; never raises."""
    try:
        import ecoguard.voice as shared  # type: ignore[import-not-found]
    except Exception:
        return None
    return shared


def mood_tag(mood: Mood) -> str:
    """``[ORANGE]``-style tag; reuses the shared alert renderer's tag when it offers one."""
    shared = _shared_voice()
    tag_fn = getattr(shared, "mood_tag", None) if shared is not None else None
    if callable(tag_fn):
        try:
            tag = tag_fn(mood)
            if isinstance(tag, str) and tag:
                return tag
        except Exception:
            pass
    return _TAGS[mood]


def lobster_line(mood: Mood, language: str) -> str:
    return _LINES.get(language, _LINES["en"])[mood]


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
