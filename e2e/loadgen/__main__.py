"""``python -m e2e.loadgen``: see e2e.loadgen.cli."""

import sys

from e2e.loadgen.cli import main

sys.exit(main())
