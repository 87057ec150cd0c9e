"""``python -m ecoguard.demo [options]``: the same as ``ecoguard demo [options]``."""

from __future__ import annotations

import sys

from ecoguard.cli import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))
