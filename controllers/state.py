"""What the operator process holds between calls: its settings and per-object state.

Built once at start-up and kept in kopf's memo, so every handler and periodic loop gets
the same instance and no module holds state of its own. Per-object state is keyed by the
object's UID: a service deleted and created again under the same name is a new object and
starts fresh. The resync loop drops the state of objects that are gone.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from controllers import kube
from controllers.prometheus_source import PrometheusSource
from controllers.settings import Settings
from controllers.workqueue import ReconcileQueue
from gpuserve.autoscaling import MetricSample, PolicyMemory

T = TypeVar("T")


class PerObject(Generic[T]):
    """A value per object UID, created on first use, dropped by ``retain``."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._items: dict[str, T] = {}
        self._lock = threading.Lock()

    def get(self, uid: str) -> T:
        with self._lock:
            item = self._items.get(uid)
            if item is None:
                item = self._items[uid] = self._factory()
            return item

    def retain(self, uids: Iterable[str]) -> int:
        """Forget every object not in ``uids``; returns how many were forgotten."""
        keep = set(uids)
        with self._lock:
            gone = [uid for uid in self._items if uid not in keep]
            for uid in gone:
                del self._items[uid]
        return len(gone)

    def __len__(self) -> int:
        return len(self._items)


class RecentWrites:
    """Writes whose effect kopf's index does not show yet.

    The index learns of our own write a moment later, through the watch; until then a
    reconcile would see the old object (or an older write's effect), write the same thing
    again and announce it again. A write stays in flight until the index shows it, for at
    most IN_FLIGHT_SECONDS: past that, a write the index never showed (someone changed the
    object back meanwhile) is sent again.
    """

    IN_FLIGHT_SECONDS = 10.0

    def __init__(self) -> None:
        self._sent: dict[tuple[str, str], tuple[object, float]] = {}
        self._lock = threading.Lock()

    def in_flight(self, key: tuple[str, str], wanted: object) -> bool:
        """Whether ``wanted`` was sent for ``key`` less than IN_FLIGHT_SECONDS ago."""
        with self._lock:
            entry = self._sent.get(key)
            if entry is None:
                return False
            sent, at = entry
            if sent != wanted or time.monotonic() - at > self.IN_FLIGHT_SECONDS:
                del self._sent[key]
                return False
            return True

    def forget(self, key: tuple[str, str]) -> None:
        """The index shows the object as wanted: nothing of it is in flight."""
        with self._lock:
            self._sent.pop(key, None)

    def record(self, key: tuple[str, str], wanted: object) -> None:
        now = time.monotonic()
        with self._lock:
            # Entries of pods that are gone would otherwise stay for the service's life.
            stale = [k for k, (_, at) in self._sent.items() if now - at > self.IN_FLIGHT_SECONDS]
            for k in stale:
                del self._sent[k]
            self._sent[key] = (wanted, now)

    def __len__(self) -> int:
        return len(self._sent)


@dataclass
class ScalingMemory:
    """The autoscaler's memory of one service: recent samples, the policy's own memory
    (None until first read from status), and what it saw when it had no metrics."""

    samples: deque[MetricSample] = field(default_factory=lambda: deque(maxlen=512))
    policy: PolicyMemory | None = None
    # What the last evaluation without metrics saw (autoscaler: skip the next like it).
    quiet: tuple[object, ...] | None = None
    # A KEDA calibration the installed CRD did not keep: (the generation it was written
    # for, when to try again). Until then the autoscaler writes none.
    keda_unkept: tuple[int | None, float] | None = None


@dataclass
class OperatorState:
    settings: Settings
    prometheus: PrometheusSource | None = None
    locks: PerObject[threading.Lock] = field(default_factory=lambda: PerObject(threading.Lock))
    scaling: PerObject[ScalingMemory] = field(default_factory=lambda: PerObject(ScalingMemory))
    writes: PerObject[RecentWrites] = field(default_factory=lambda: PerObject(RecentWrites))
    # Services to reconcile, by (namespace, name); its workers start with the loops.
    queue: ReconcileQueue[tuple[str, str]] = field(
        default_factory=lambda: ReconcileQueue(kube.RECONCILE_WORKERS)
    )
    # A digest of what gpuserve applied to each child, by (kind, namespace, name).
    child_digests: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # What each service was last queued for (controllers.inferenceservice.what_queues).
    last_queued: dict[tuple[str, str], tuple[Any, ...]] = field(default_factory=dict)

    @classmethod
    def start(cls, settings: Settings) -> OperatorState:
        source = (
            PrometheusSource(settings.prometheus_url, windows=settings.windows)
            if settings.prometheus_url
            else None
        )
        return cls(settings=settings, prometheus=source)

    def retain(self, uids: Iterable[str]) -> None:
        keep = set(uids)
        self.locks.retain(keep)
        self.scaling.retain(keep)
        self.writes.retain(keep)


def state_of(kw: dict[str, Any]) -> OperatorState:
    """The operator's state from a handler's keyword arguments (kopf's memo)."""
    state: OperatorState = kw["memo"].state
    return state


def uid_of(body: dict[str, Any]) -> str:
    meta = body["metadata"]
    # An object read back without a UID (never from the API server) falls back to its key.
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta['name']}")
