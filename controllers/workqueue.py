"""The reconcile queue: watch events name a service, a few workers bring it in line.

Every trigger (the service changed, one of its pods or children changed) used to run a
whole reconcile inside kopf's per-object worker, on kopf's thread pool. During a burst
(1,000 services created at once: 6,000 objects, each with several watch events) those
workers waited in line for a thread, each holding its parsed watch events, and the
operator's memory grew with the backlog (docs/bench-notes/scale-memory.md). Now a handler
only records which service wants a reconcile and returns; kopf's worker is done at once.

The queue follows the rule of Kubernetes' own controllers (client-go's workqueue): a key
is in the queue at most once, a key being reconciled is never reconciled twice at the
same time, and a key added meanwhile runs once more afterwards. Ten events for one
service become one or two reconciles that read the latest state from the indexes. A
failed reconcile is retried after a delay that doubles up to a cap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
K = TypeVar("K")

RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0


class ReconcileQueue(Generic[K]):
    """Keys to reconcile, deduplicated, worked off by ``workers`` threads.

    ``work(key)``, given to ``start``, runs in a worker thread (it may block on the API);
    it raises to ask for a retry. ``add`` may be called from the event loop only.
    """

    # A reconcile mostly waits on the API server (creating a Service took 450 ms there on
    # average in the scale bench), so the operator runs many more workers than cores
    # (kube.RECONCILE_WORKERS); each holds only one service's objects.
    def __init__(self, workers: int = 8) -> None:
        self._work: Callable[[K], None] | None = None
        self._workers = workers
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._running: set[K] = set()
        self._again: set[K] = set()  # added while running: once more when done
        self._failures: dict[K, int] = {}
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reconcile")
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timers: dict[K, asyncio.TimerHandle] = {}  # add_later's, one per key

    def start(self, work: Callable[[K], None]) -> None:
        self._work = work
        self._loop = asyncio.get_running_loop()
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self._workers)]

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def add(self, key: K) -> None:
        if key in self._running:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.add, key)

    def add_later(self, key: K, delay: float) -> None:
        """Add ``key`` in ``delay`` seconds, from any thread: a reconcile asks to run again
        when its plan changes with time alone (a pod's drain ends), which no watch event
        announces. One timer per key, the earliest: the run it starts asks again for what
        is still ahead. Before ``start`` (no workers) this does nothing."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._schedule, key, max(delay, 0.0))

    def _schedule(self, key: K, delay: float) -> None:
        assert self._loop is not None
        when = self._loop.time() + delay
        timer = self._timers.get(key)
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._timers[key] = self._loop.call_at(when, self._due, key)

    def _due(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def __len__(self) -> int:
        return len(self._queued) + len(self._running)

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            key = await self._queue.get()
            assert self._work is not None, "start() gives the work"
            self._queued.discard(key)
            self._running.add(key)
            try:
                await loop.run_in_executor(self._executor, self._work, key)
            except Exception as exc:  # a failed reconcile must not end the worker
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                delay = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (failures - 1))
                # An expected race (e.g. a status written from a copy another writer had
                # just made stale) is retried like any failure, but is not a warning.
                level = logging.DEBUG if getattr(exc, "transient", False) else logging.WARNING
                log.log(level, "reconcile of %s failed (retry in %.0f s): %s", key, delay, exc)
                self.add_after(key, delay)
            else:
                self._failures.pop(key, None)
            finally:
                self._running.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.add(key)
