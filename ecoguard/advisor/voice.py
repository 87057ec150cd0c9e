"""Moved: the one voice module is ``ecoguard.voice`` (alerts and answers alike). This name stays
only until the advisor CLI imports ``use_color`` from there; nothing else uses it."""

from __future__ import annotations

from ecoguard.voice import colorize, lobster_line, mood_tag, use_color

__all__ = ["colorize", "lobster_line", "mood_tag", "use_color"]
