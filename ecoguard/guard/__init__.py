"""The guard: catches energy traps in live ``from_pretrained`` and ``generate`` calls.

``ecoguard.guard.install.install()`` patches transformers (through wrapt, from post-import
hooks); this package's ``__init__`` stays light: it only exposes the event record.
"""

from __future__ import annotations

from ecoguard.guard.records import FindingEvent

__all__ = ["FindingEvent"]
