"""kopf's watch of a kind the API server no longer serves: a pause, not the operator's end.

When a CRD is deleted, kopf's watcher of that kind can send its next list or watch request
before kopf's own CRD observer has seen the deletion and stopped the watcher. The API
server answers 404, kopf's ``infinite_watch`` lets that error out, and the watcher task
fails. kopf's orchestrator re-raises a failed watcher's error in itself whenever it
notices the failure before the observer's revision does; it is one of kopf's root tasks,
and when one ends the whole operator shuts down. The e2e test of deleting the CRDs under
live services failed in CI three times on this 404's tracebacks, logged in three forms.

A 404 on a watched kind only says "not served right now": its CRD is going, or has just
come back and is not served yet. So the watch stream ends quietly after a pause, and
``infinite_watch`` starts a new one: kopf's observer cancels the watcher once it sees the
CRD gone, and a kind that comes back is listed again by the same watcher. Every other
error is kopf's to handle as before.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from kopf._cogs.clients import errors, watching

log = logging.getLogger(__name__)

# kopf's own stream, kept for the wrapper and for comparison in tests.
KOPF_CONTINUOUS_WATCH = watching.continuous_watch
# Long enough not to spin while kopf's observer catches up (milliseconds), short enough
# that a kind whose CRD comes straight back is listed again at once.
NOT_SERVED_PAUSE_S = 1.0
# One warning per kind in this many seconds: a kind that stays unserved (kopf never sees
# its CRD change) would otherwise log every pause.
WARN_EVERY_S = 60.0
_warned_at: dict[str, float] = {}


async def continuous_watch_pausing_on_404(**kwargs: Any) -> AsyncIterator[Any]:
    """kopf's ``continuous_watch`` (same keyword arguments), ending after a pause where the
    kind answers 404 instead of failing its watcher."""
    try:
        async for item in KOPF_CONTINUOUS_WATCH(**kwargs):
            yield item
    except errors.APINotFoundError as exc:
        kind = str(kwargs.get("resource"))
        now = time.monotonic()
        if now - _warned_at.get(kind, -math.inf) >= WARN_EVERY_S:
            _warned_at[kind] = now
            log.warning(
                "%s is not served by the API server (%s): its CRD is gone or not served "
                "yet; watching again every %.0f s until the CRD's change is seen",
                kind, exc, NOT_SERVED_PAUSE_S,
            )
        await asyncio.sleep(NOT_SERVED_PAUSE_S)


def install() -> bool:
    """Route kopf's ``infinite_watch`` through the wrapper (it looks ``continuous_watch``
    up in its module at each new stream). A kopf without that function keeps its own
    behaviour: False then, with a warning."""
    if not (callable(getattr(watching, "continuous_watch", None))
            and callable(getattr(watching, "infinite_watch", None))):
        log.warning("kopf's watching module has changed: a 404 on a watched kind is left to kopf")
        return False
    watching.continuous_watch = continuous_watch_pausing_on_404
    return True
