"""kopf's start-up barrier, woken only when it opens or closes.

Until every watched object of every kind has been indexed, each object's worker waits
on one shared condition (``ToggleSet.wait_for(True)`` over a toggle per object still to
index). kopf notifies that condition whenever a toggle is added or dropped, so each of
the N objects listed at start-up wakes every worker already waiting: N^2/2 wake-ups. With
5,000 services and their children (25,000 objects) a restarted operator reconciled about
one service per second (docs/bench-notes/scale-memory.md).

A waiter on the set only cares whether the set as a whole is on; adding or dropping one
toggle changes no toggle's own state. So notifying only when ``is_on()`` flips wakes
every waiter exactly when its answer can have changed, and no other time. Toggles that
turn on or off still notify as before (``Toggle.turn_to``).
"""

from __future__ import annotations

import logging

from kopf._cogs.aiokits import aiotoggles

log = logging.getLogger(__name__)

# kopf's own methods, kept for comparison (tests/test_kopf_barrier.py).
KOPF_MAKE_TOGGLE = aiotoggles.ToggleSet.make_toggle
KOPF_DROP_TOGGLE = aiotoggles.ToggleSet.drop_toggle


async def _make_toggle(
    self: aiotoggles.ToggleSet, __val: bool = False, *, name: str | None = None
) -> aiotoggles.Toggle:
    toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
    async with self._condition:
        before = self.is_on()
        self._toggles.add(toggle)
        if self.is_on() != before:
            self._condition.notify_all()
    return toggle


async def _drop_toggle(self: aiotoggles.ToggleSet, toggle: aiotoggles.Toggle) -> None:
    async with self._condition:
        before = self.is_on()
        self._toggles.discard(toggle)
        if self.is_on() != before:
            self._condition.notify_all()


def install() -> bool:
    """Replace the two notifying methods of kopf's ToggleSet (same signatures, same
    outcome for every waiter). A kopf whose ToggleSet differs keeps its own (slower at
    start-up, never wrong): False then, with a warning."""
    found = aiotoggles.ToggleSet.__dict__
    if not all(name in found for name in ("make_toggle", "drop_toggle", "is_on")):
        log.warning("kopf's ToggleSet has changed: its start-up barrier is left as it is")
        return False
    aiotoggles.ToggleSet.make_toggle = _make_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggle = _drop_toggle  # type: ignore[method-assign]
    return True
