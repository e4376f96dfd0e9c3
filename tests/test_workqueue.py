"""The reconcile queue: one entry per key, never two reconciles of a key at once, a key
added while it runs runs once more, and a failure is retried."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from controllers import workqueue
from controllers.workqueue import ReconcileQueue


class Recorder:
    def __init__(self, hold: float = 0.0, fail_first: int = 0) -> None:
        self.calls: list[str] = []
        self.concurrent: dict[str, int] = {}
        self.most_at_once: dict[str, int] = {}
        self.hold = hold
        self.fail_first = fail_first
        self.lock = threading.Lock()

    def __call__(self, key: str) -> None:
        with self.lock:
            self.calls.append(key)
            self.concurrent[key] = self.concurrent.get(key, 0) + 1
            self.most_at_once[key] = max(self.most_at_once.get(key, 0), self.concurrent[key])
            failing = self.calls.count(key) <= self.fail_first
        time.sleep(self.hold)
        with self.lock:
            self.concurrent[key] -= 1
        if failing:
            raise RuntimeError("API server away")


async def drained(queue: ReconcileQueue[str], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while len(queue) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert not len(queue), "queue did not drain"


def test_keys_added_while_queued_are_reconciled_once() -> None:
    async def scenario() -> list[str]:
        work = Recorder(hold=0.05)
        queue: ReconcileQueue[str] = ReconcileQueue(workers=2)
        queue.add("blocker-a")  # both workers busy, so the rest wait in the queue
        queue.add("blocker-b")
        queue.start(work)
        await asyncio.sleep(0.01)
        for _ in range(10):
            queue.add("svc")
        await drained(queue)
        await queue.stop()
        return work.calls

    calls = asyncio.run(scenario())
    assert calls.count("svc") == 1
    assert sorted(calls) == ["blocker-a", "blocker-b", "svc"]


def test_a_key_added_while_it_runs_runs_again_after_and_never_concurrently() -> None:
    async def scenario() -> Recorder:
        work = Recorder(hold=0.1)
        queue: ReconcileQueue[str] = ReconcileQueue(workers=4)
        queue.start(work)
        queue.add("svc")
        await asyncio.sleep(0.03)  # now running
        queue.add("svc")
        queue.add("svc")
        await drained(queue)
        await queue.stop()
        return work

    work = asyncio.run(scenario())
    assert work.calls == ["svc", "svc"]
    assert work.most_at_once["svc"] == 1


def test_a_failed_reconcile_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workqueue, "RETRY_FIRST_S", 0.02)

    async def scenario() -> list[str]:
        work = Recorder(fail_first=2)
        queue: ReconcileQueue[str] = ReconcileQueue(workers=1)
        queue.start(work)
        queue.add("svc")
        deadline = time.monotonic() + 5
        while work.calls.count("svc") < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await drained(queue)
        await queue.stop()
        return work.calls

    assert asyncio.run(scenario()) == ["svc", "svc", "svc"]


def test_a_reconcile_asks_from_its_thread_to_run_again_later_and_the_earliest_ask_stands() -> None:
    # A reconcile (in a worker thread) whose plan changes when a pod's drain ends asks to
    # run again then: no watch event announces it.
    async def scenario() -> tuple[list[tuple[str, float]], list[str]]:
        runs: list[tuple[str, float]] = []
        started = time.monotonic()

        def work(key: str) -> None:
            runs.append((key, time.monotonic() - started))
            if len(runs) == 1:  # the first run asks twice: the later ask is dropped
                queue.add_later(key, 0.6)
                queue.add_later(key, 0.2)
                queue.add_later(key, 0.4)

        queue: ReconcileQueue[str] = ReconcileQueue(workers=2)
        before = ReconcileQueue[str](workers=1)
        before.add_later("idle", 0.0)  # not started: nothing to run it, nothing scheduled
        queue.start(work)
        queue.add("svc")
        await asyncio.sleep(1.0)
        await drained(queue)
        await queue.stop()
        await before.stop()
        return runs, [k for k, _ in runs]

    runs, keys = asyncio.run(scenario())
    assert keys == ["svc", "svc"]
    assert 0.15 < runs[1][1] - runs[0][1] < 0.5
