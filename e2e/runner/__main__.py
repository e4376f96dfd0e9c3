"""``python -m e2e.runner --kubeconfig PATH``: run the local data plane until interrupted."""

from e2e.runner.cli import main

raise SystemExit(main())
