"""kopf's start-up barrier with gpuserve's notification rule (controllers.kopf_barrier):
the same outcome for every waiter, without waking them all on every object."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest
from kopf._cogs.aiokits import aiotoggles

from controllers import kopf_barrier


class CountingAll:
    """``all``, counting how often the barrier's state is asked for."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, states: Iterable[bool]) -> bool:
        self.calls += 1
        return all(states)


async def start_up(objects: int) -> int:
    """As kopf starts: a toggle per object still to index, a worker waiting on the set
    for each, then the objects indexed one by one. Returns how often the barrier's
    state was evaluated; every worker must have passed."""
    fn = CountingAll()
    barrier = aiotoggles.ToggleSet(fn)
    kind_listed = await barrier.make_toggle(name="kind")
    toggles = [await barrier.make_toggle(name=f"object {i}") for i in range(objects)]
    passed = 0

    async def worker(toggle: aiotoggles.Toggle) -> None:
        nonlocal passed
        await barrier.drop_toggle(toggle)
        await barrier.wait_for(True)
        passed += 1

    tasks = []
    for toggle in toggles:
        tasks.append(asyncio.create_task(worker(toggle)))
        await asyncio.sleep(0)  # each worker starts waiting before the next object comes
    assert passed == 0  # the kind's listing is not over: nobody passes
    await barrier.drop_toggle(kind_listed)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    assert passed == objects
    return fn.calls


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aiotoggles.ToggleSet, "make_toggle", aiotoggles.ToggleSet.make_toggle)
    monkeypatch.setattr(aiotoggles.ToggleSet, "drop_toggle", aiotoggles.ToggleSet.drop_toggle)
    kopf_barrier.install()  # undone by monkeypatch at the end


def test_every_worker_passes_once_all_is_indexed_with_linear_wakeups(patched: None) -> None:
    objects = 400
    calls = asyncio.run(start_up(objects))
    assert calls < 8 * objects, calls


def test_kopfs_own_rule_wakes_every_waiter_for_every_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the patch removes (kopf as installed): quadratic in the objects."""
    monkeypatch.setattr(aiotoggles.ToggleSet, "make_toggle", kopf_barrier.KOPF_MAKE_TOGGLE)
    monkeypatch.setattr(aiotoggles.ToggleSet, "drop_toggle", kopf_barrier.KOPF_DROP_TOGGLE)
    objects = 400
    calls = asyncio.run(start_up(objects))
    assert calls > objects * objects / 4, calls
