"""``import ecoguard.auto``: turn the guard on from ECOGUARD_* environment variables.

The one side-effecting module of the package. It installs the guard (``ecoguard.install()``
with Settings from the environment) and makes sure alerts are seen: if the application has not
configured logging, alerts go to stderr through a fallback handler that falls silent as soon as
the application adds a root handler (so nothing is printed twice).
"""

from __future__ import annotations

import logging
import sys

from ecoguard.config import Settings
from ecoguard.guard.install import install


class _FallbackHandler(logging.StreamHandler):
    """stderr handler that defers to the application's root handlers once they exist."""

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        super().emit(record)


def _ensure_visible() -> None:
    logger = logging.getLogger("ecoguard")
    configured = [h for h in logger.handlers if not isinstance(h, logging.NullHandler)]
    if configured or logging.getLogger().handlers:
        return
    handler = _FallbackHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(logging.WARNING)
    logger.addHandler(handler)


# A bad ECOGUARD_* value is warned about and its default used: a typo in the environment must
# never break the application's import (the CLI, reading the same variables, exits 2 instead).
settings = install(settings=Settings.from_env(on_bad_value="warn"))
_ensure_visible()
