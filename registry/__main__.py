"""``python -m registry`` runs the CLI."""

import sys

from registry.cli.main import main

sys.exit(main())
