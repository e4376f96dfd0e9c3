"""Operator settings and the cluster-wide objects every service relies on."""

from __future__ import annotations

import logging
import os
from typing import Any

import kopf

from controllers import kube, periodic
from controllers.inferenceservice import CHILD_RESOURCES, MANAGED
from controllers.settings import Settings, SettingsError
from controllers.state import OperatorState
from gpuserve.api.models import GROUP
from gpuserve.resources.naming import STANDBY_PRIORITY_CLASS, priority_class_name

log = logging.getLogger(__name__)
LIST_CHUNK = 500

# Interactive serving outranks batch serving, so under GPU pressure the scheduler
# preempts batch pods first; warm-pool standby pods rank below both, so a serving pod of
# any service can preempt them, and they never preempt anything themselves.
PRIORITIES = {
    priority_class_name("interactive"): 100_000,
    priority_class_name("batch"): 50_000,
    STANDBY_PRIORITY_CLASS: 1_000,
}
_NEVER_PREEMPT = {STANDBY_PRIORITY_CLASS}


def priority_classes() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpuserve"}},
            "value": value,
            "preemptionPolicy": "Never" if name in _NEVER_PREEMPT else "PreemptLowerPriority",
            "globalDefault": False,
            "description": (
                "gpuserve: warm-pool standby pods, preempted by serving pods"
                if name in _NEVER_PREEMPT
                else "gpuserve: priority of Triton pods of this tier"
            ),
        }
        for name, value in PRIORITIES.items()
    ]


@kopf.on.startup()
async def configure(memo: kopf.Memo, settings: kopf.OperatorSettings, **kw: Any) -> None:
    """The one start-up handler: read the environment once, configure kopf, make sure the
    PriorityClasses exist, and start the periodic loops with the operator's state."""
    try:
        ours = Settings.from_environment(os.environ)
    except SettingsError as exc:  # a configuration mistake: stop, and say which variable
        raise kopf.PermanentError(str(exc)) from None
    state = OperatorState.start(ours)
    memo.state = state
    # Progress and the diff base live in status, not annotations: a GitOps tool comparing
    # the manifest it applied sees no foreign annotations (no drift).
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf.progress")
    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(
        field="status.kopf.lastHandledConfiguration"
    )
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    # kopf's own "handler succeeded" events would be a write per reconcile; gpuserve posts
    # the events that mean something itself.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.execution.max_workers = 8
    # kopf keeps one worker (and its event queue) per object until it has been idle for
    # idle_timeout (default 5 s). At 1,000 services (6,000 watched objects) they were most
    # of the operator's memory during a burst (docs/bench-notes/reliability.md). No limit
    # on their number by default: with one, a restart over more existing objects than the
    # limit stalled in our tests (most likely the workers waiting for the initial indexing
    # hold every slot, so the objects still to be indexed never get one).
    settings.queueing.worker_limit = ours.worker_limit or None
    settings.queueing.idle_timeout = ours.worker_idle_seconds
    # A (re)start lists every watched object before watching. Whole, the list of 10,000
    # Deployments at 5,000 services is one parsed document that alone went over the
    # chart's 512Mi limit; in chunks, each is dispatched before the next is read.
    settings.watching.chunk_size = LIST_CHUNK
    managed = ",".join(f"{k}={v}" for k, v in MANAGED.items())
    for resource in CHILD_RESOURCES:
        settings.watching.label_selectors[resource] = managed
    for pc in priority_classes():  # three small writes, once, before any watch matters
        kube.apply_if_changed(pc)
    periodic.start(memo, state, settings, kw)
