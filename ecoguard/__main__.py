import sys

from ecoguard.cli import main

sys.exit(main())
