"""``python -m registry`` runs the CLI."""

import sys

from registry.cli import main

sys.exit(main())
