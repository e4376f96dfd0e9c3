"""kopf entry file: `kopf run operator/main.py` (or the `gpuserve-operator` script).

`operator` is a standard-library module, so this directory is deliberately not a
package; kopf loads this file by path.
"""

import controllers.handlers  # noqa: F401  (registers every handler)
from controllers.entrypoint import main

if __name__ == "__main__":
    raise SystemExit(main())
