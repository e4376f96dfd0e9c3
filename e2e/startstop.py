"""One ``with`` protocol for the harness's servers and runners: enter starts, exit stops.

Each wrapper (Prometheus, tritonserver, the config validator, the pod runner, the data
plane) has its own ``start`` and ``stop``; this mixin is the only place their context
manager is written, so they all clean up the same way when the block raises.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self


class StartStop:
    """``with obj:`` calls ``obj.start()`` unless it already runs, and always ``obj.stop()``."""

    def start(self) -> object:
        raise NotImplementedError

    def stop(self) -> object:
        raise NotImplementedError

    def _running(self) -> bool:
        """Whether ``start`` already ran; a wrapper that may be started before ``with``
        overrides it so that entering does not start a second process."""
        return False

    def __enter__(self) -> Self:
        if not self._running():
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
