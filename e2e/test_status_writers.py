"""Two writers of an InferenceService's status, on the real API server: the reconcile and
the autoscaler. Each writes with the resourceVersion it decided from, and merge patches
replace lists whole, so a write from a stale copy would drop the other's conditions.

The autoscaler is called in this process, on a copy of the service taken before another
writer's status write, as a pass does when the reconcile writes between the index's
update and the autoscaler's write. Its signals are given (a Readings of one pass); the
API server, the CRD's schema and kopf's event posting are the real ones.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import types
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
import yaml
from kopf._core.engines import posting
from kubernetes import client
from kubernetes.config import kube_config

from controllers import kube
from controllers.autoscaler import evaluate
from controllers.inferenceservice import CHILD_INDEXES, reconcile
from controllers.prometheus_source import Readings
from controllers.settings import Settings
from controllers.state import OperatorState
from e2e.cluster.testkit import ClusterHandle
from e2e.invalid_cases import valid_llm_service, valid_service
from e2e.operatorkit import EXAMPLE_CLASSES, install_crds
from e2e.runner.stack import apply, service_status
from gpuserve.api.models import AcceleratorClassSpec
from gpuserve.resources import inference_pool
from gpuserve.resources.naming import SERVICES_PLURAL

pytestmark = pytest.mark.cluster


@pytest.fixture
def api(cluster: ClusterHandle, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """controllers.kube talking to the local cluster, as the operator does."""
    install_crds(cluster)
    # The client reads its default kubeconfig path when imported, not from the env.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig))
    monkeypatch.setattr(kube, "_api", None)
    monkeypatch.setattr(kube, "_dynamic", None)
    # Loading a kubeconfig sets the process-wide default configuration: restored after.
    monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
    yield
    if kube._api is not None:
        kube._api.close()


def handler_kwargs() -> dict[str, Any]:
    """What a pass hands each evaluation: the operator's state and kopf's indexes (the
    example classes, no nodes and no pods: nothing of the service runs yet)."""
    classes = {
        doc["metadata"]["name"]: [AcceleratorClassSpec.model_validate(doc["spec"])]
        for doc in yaml.safe_load_all(EXAMPLE_CLASSES.read_text())
        if doc and doc.get("kind") == "AcceleratorClass"
    }
    state = OperatorState(settings=Settings(prometheus_url="http://127.0.0.1:9"))
    return {
        "memo": types.SimpleNamespace(state=state),
        "accelerator_classes": classes,
        "gpu_nodes": {},
        "gpu_pods": {},
        "service_pods": {},
        **{index: {} for index in CHILD_INDEXES},
    }


def posting_context() -> tuple[contextvars.Context, asyncio.Queue[Any], asyncio.AbstractEventLoop]:
    """kopf's posting context, as the operator's loops run in it: events go to a queue."""
    loop = asyncio.new_event_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    context = contextvars.copy_context()
    context.run(posting.settings_var.set, kopf.OperatorSettings())
    context.run(posting.event_queue_loop_var.set, loop)
    context.run(posting.event_queue_var.set, queue)
    return context, queue, loop


def posted(queue: asyncio.Queue[Any], loop: asyncio.AbstractEventLoop) -> list[str]:
    loop.run_until_complete(asyncio.sleep(0))  # runs the thread-safe put_nowait calls
    reasons = []
    while not queue.empty():
        reasons.append(queue.get_nowait().reason)
    return reasons


def write_meanwhile(namespace: str, name: str, reason: str) -> None:
    """The other writer (the reconcile) writes a condition of its own."""
    condition = {
        "type": "Reconciling",
        "status": "True",
        "reason": reason,
        "message": "by the other writer",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    assert kube.patch_status(
        plural=SERVICES_PLURAL,
        name=name,
        namespace=namespace,
        status={"conditions": [condition]},
        live_status={},
    )


def demand(namespace: str, *names: str) -> Readings:
    """Heavy demand on services with no pods: the policy scales them up from zero."""
    signals = {"arrival_rate": 400.0, "success_rate": 400.0, "queue_depth": 50.0}
    return Readings(at=1_000.0, values={(namespace, n): dict(signals) for n in names})


def test_a_decision_from_a_stale_copy_is_made_again_and_keeps_the_other_writers_conditions(
    api: None, cluster: ClusterHandle, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("writers", "contended"):
        apply(cluster, namespace, valid_service(name))
    readings = demand(namespace, "writers", "contended")
    kw = handler_kwargs()
    memory = kw["memo"].state.scaling
    context, queue, loop = posting_context()
    try:
        stale = kube.get_custom(SERVICES_PLURAL, "writers", namespace)
        assert stale is not None
        write_meanwhile(namespace, "writers", "WrittenMeanwhile")
        decision = context.run(evaluate, stale, kw, readings)
        assert decision is not None and decision.desired_replicas >= 1
        status = service_status(cluster, namespace, "writers")
        kinds = {c["type"]: c for c in status.get("conditions", [])}
        # Decided again from the live object: the other writer's condition survived,
        # the autoscaler's own was added, and its decision was written.
        assert kinds.get("Reconciling", {}).get("reason") == "WrittenMeanwhile", status
        assert "MetricsAvailable" in kinds, status
        assert status.get("desiredReplicas") == decision.desired_replicas, status
        # One announcement, of the decision that was written; the memory is its memory.
        assert posted(queue, loop) == ["ScaledUp"]
        assert memory.get(stale["metadata"]["uid"]).policy == decision.memory

        # A copy that stays stale (the object changes again before the second write
        # too) leaves nothing behind: no event, no memory of an unrecorded decision.
        stale = kube.get_custom(SERVICES_PLURAL, "contended", namespace)
        assert stale is not None
        write_meanwhile(namespace, "contended", "WrittenMeanwhile")
        read_live = kube.get_custom
        reads: list[str] = []

        def raced(plural: str, name: str, ns: str | None) -> dict[str, Any] | None:
            live = read_live(plural, name, ns)
            reads.append(name)
            write_meanwhile(namespace, name, "WrittenAgain")
            return live

        monkeypatch.setattr(kube, "get_custom", raced)
        with pytest.raises(kube.StaleStatus):
            context.run(evaluate, stale, kw, readings)
        monkeypatch.setattr(kube, "get_custom", read_live)
        assert reads == ["contended"]
        assert posted(queue, loop) == []
        assert memory.get(stale["metadata"]["uid"]).policy is None
        assert "desiredReplicas" not in service_status(cluster, namespace, "contended")
    finally:
        loop.close()


def test_a_pool_skipped_from_a_stale_copy_is_announced_once_when_recorded(
    api: None, cluster: ClusterHandle, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reconcile announces a change of the InferencePool condition (a Warning when the
    pool starts being skipped) once, when the status saying so is written: a pass refused
    as stale leaves the old condition, and the retry must not announce it a second time."""
    name = "chat"
    apply(cluster, namespace, valid_llm_service(name))
    # The operator's memory of a discovery that found no InferencePool kind a moment ago:
    # the shared cluster serves the kind, and this test is about a service without it.
    monkeypatch.setitem(
        kube._unserved, (inference_pool.API_VERSION, inference_pool.KIND), time.monotonic()
    )
    kw = handler_kwargs()
    context, queue, loop = posting_context()

    def skipped_posted() -> int:
        return posted(queue, loop).count("InferencePoolSkipped")

    try:
        stale = kube.get_custom(SERVICES_PLURAL, name, namespace)
        assert stale is not None
        write_meanwhile(namespace, name, "WrittenMeanwhile")
        with pytest.raises(kube.StaleStatus):
            context.run(reconcile, stale, kw)
        assert skipped_posted() == 0
        assert "InferencePoolApplied" not in {
            c["type"] for c in service_status(cluster, namespace, name).get("conditions", [])
        }

        # Read again: the pass records the condition and announces it, once.
        live = kube.get_custom(SERVICES_PLURAL, name, namespace)
        assert live is not None
        context.run(reconcile, live, kw)
        assert skipped_posted() == 1
        kinds = {c["type"]: c for c in service_status(cluster, namespace, name)["conditions"]}
        assert kinds["InferencePoolApplied"]["reason"] == "CRDNotInstalled", kinds
        # Still skipped on the next pass: nothing new to announce.
        again = kube.get_custom(SERVICES_PLURAL, name, namespace)
        assert again is not None
        context.run(reconcile, again, kw)
        assert skipped_posted() == 0
    finally:
        loop.close()
