"""Periodic work (resync, autoscaler, class capacity) from operator-level loops.

kopf puts a finalizer on every object that has a timer, so that it can stop the timer
before the object goes. With per-object timers every InferenceService and AcceleratorClass
carried `gpuserve.io/finalizer`: deleting one (or its namespace, or the CRD) then waited
for a running operator, forever if it was stopped or uninstalled, and a CRD deletion
waited even with it running (kopf stops serving a terminating CRD). These loops walk the
indexes instead, so the objects carry no finalizer; kopf removes the old one by itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import kopf

from controllers.acceleratorclass import report_capacity
from controllers.autoscaler import autoscale_pass
from controllers.converging import in_kopf_context
from controllers.inferenceservice import reconcile_key
from controllers.packed import Packed
from controllers.standby import Peering, standing_by
from controllers.state import OperatorState, uid_of

log = logging.getLogger(__name__)
Body = dict[str, Any]


Work = Callable[[Body], object]


def _run_pass(
    what: str, bodies: Iterable[Body], work_for_pass: Callable[[], Work], peering: Peering | None
) -> tuple[int, bool]:
    """One pass over the objects, in a worker thread: how many were handled, and whether
    any was left to a peer that outranks this replica. ``work_for_pass`` is asked for the
    pass's work once, before the first object this replica acts on (the autoscaler reads
    every service's metrics there)."""
    acting: dict[str | None, bool] = {}
    work: Work | None = None
    if peering is not None and peering.clusterwide:
        try:  # one peering object for everything
            acting[None] = not standing_by(peering, None)
        except Exception as exc:  # unsure who acts: write nothing this pass
            log.warning("%s: cannot read the peering object: %s", what, exc)
            return 0, True
    done = 0
    for body in bodies:
        meta = body.get("metadata", {})
        namespace = meta.get("namespace")
        # One peering object per pass for a cluster-wide operator, one per namespace else.
        scope = namespace if peering is not None and not peering.clusterwide else None
        try:
            if scope not in acting:
                acting[scope] = not standing_by(peering, scope)
            if acting[scope]:
                work = work or work_for_pass()
                # in kopf's posting context, so that kopf.event/kopf.warn work
                in_kopf_context(work, body)
                done += 1
        except Exception as exc:  # one object's failure must not stop the loop
            # A transient one (a status read just before another writer's) is redone by
            # the next pass without a warning.
            level = logging.DEBUG if getattr(exc, "transient", False) else logging.WARNING
            log.log(level, "%s of %s/%s failed: %s", what, namespace or "", meta.get("name"), exc)
    return done, not all(acting.values())


async def _every(
    interval: float,
    what: str,
    index: Callable[[], Any],
    work_for_pass: Callable[[], Work],
    peering: Peering | None,
    bodies: Callable[[list[Packed]], Iterable[Body]] | None = None,
) -> None:
    """Every ``interval`` seconds, one pass over the objects of ``index`` (one of kopf's).

    Only the list of entries is taken here, on the event loop (kopf fills the index from
    it); each is parsed in the pass's thread as it comes. Parsing 5,000 services on the
    loop took it away from kopf's watches for seconds per pass, and the reconcile queue,
    fed from those watches, ran dry."""
    was_standing = False
    read = bodies or _parsed
    while True:
        await asyncio.sleep(interval)
        try:
            entries = [entry for store in list(index().values()) for entry in list(store)]
            _, standing = await asyncio.to_thread(
                _run_pass, what, read(entries), work_for_pass, peering
            )
        except Exception as exc:  # the loop must outlive any one pass
            log.warning("%s pass failed: %s", what, exc)
            continue
        if standing != was_standing:  # log the transitions only
            log.info("%s: %s", what, "standing by for a peer" if standing else "acting again")
            was_standing = standing


def _parsed(entries: list[Packed]) -> Iterator[Body]:
    return (entry.unpack() for entry in entries)


def _resync(state: OperatorState, entries: list[Packed]) -> Iterator[Body]:
    """The services to reconcile; once all are seen, the state of services that are gone
    is dropped."""
    uids = []
    for entry in entries:
        body = entry.unpack()
        uids.append(uid_of(body))
        yield body
    state.retain(uids)


def _key(body: Body) -> tuple[str, str]:
    meta = body["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def start(
    memo: kopf.Memo, state: OperatorState, settings: kopf.OperatorSettings, kw: dict[str, Any]
) -> None:
    """Start the loops. ``kw`` holds the indexes (live objects kopf keeps filling), as
    every handler gets them; the loops hand it on with kopf's memo."""
    peering = Peering.from_settings(settings)
    kw = {**kw, "memo": memo}
    every = state.settings
    state.queue.start(lambda key: in_kopf_context(reconcile_key, key, kw))
    loop = asyncio.get_running_loop()
    memo.periodic = [
        asyncio.create_task(
            _every(
                every.resync_seconds,
                "resync",
                lambda: kw["services"],
                # Through the reconcile queue, like every other trigger: one path, and a
                # service the watches already queued is not reconciled a second time.
                lambda: lambda body: loop.call_soon_threadsafe(state.queue.add, _key(body)),
                peering,
                bodies=lambda entries: _resync(state, entries),
            )
        ),
        asyncio.create_task(
            _every(
                every.autoscale_interval,
                "autoscale",
                lambda: kw["services"],
                lambda: autoscale_pass(kw),
                peering,
            )
        ),
        asyncio.create_task(
            _every(
                every.class_report_seconds,
                "capacity",
                lambda: kw["class_bodies"],
                lambda: lambda body: report_capacity(body, body["metadata"]["name"], kw),
                peering,
            )
        ),
    ]


@kopf.on.cleanup()
async def stop_periodic(memo: kopf.Memo, **_: Any) -> None:
    for task in getattr(memo, "periodic", []):
        task.cancel()
    state: OperatorState | None = getattr(memo, "state", None)
    if state is not None:
        await state.queue.stop()
