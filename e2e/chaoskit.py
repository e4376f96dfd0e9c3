"""Helpers of the reliability suites (chaos, fuzz, lifecycle edges, scale benchmark).

- `restart_component`: stop one control-plane daemon of the local harness (SIGTERM or
  SIGKILL) and start it again with the very command line `up` used, by its PID record;
- `Api`: the few Kubernetes calls the suites make, retried through API-server outages;
- `Fleet`: a seeded model of many InferenceServices and the changes the suites make to them;
- `fleet_problems`: every way the cluster differs from what the fleet says it should be
  (missing, duplicated or orphaned children, pod counts, status);
- `unexpected_tracebacks`: tracebacks in an operator log that are not transport errors.
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster import components, lifecycle, pki, procs, settings
from e2e.cluster.apiclient import admin_tls, get_status, insecure_tls
from e2e.cluster.testkit import ClusterHandle, tolerating
from e2e.invalid_cases import valid_service
from e2e.manifests import example_classes
from e2e.operatorkit import WRITE_VERBS, write_counts
from gpuserve.api.models import GROUP, VERSION, parse_inference_service
from gpuserve.resources.naming import (
    ANNOTATION_CONFIG_HASH,
    LABEL_CLASS,
    LABEL_ROLE,
    LABEL_SERVICE,
    ROLE_SERVING,
    SERVICES_PLURAL,
    config_map_name,
    deployment_name,
    standby_deployment_name,
)
from gpuserve.resources.rendering import config_hash

T = TypeVar("T")
Obj = dict[str, Any]
MANAGED = "app.kubernetes.io/managed-by=gpuserve"
# The classes of examples/accelerator-classes.yaml (what install_classes puts in).
EXAMPLE_CLASSES = ("h100", "a100-3g40gb", "a100-1g10gb", "l4")

# --------------------------------------------------------------------------- control plane

# Daemons this process restarted are its children: reap them when the session ends
# (the cluster's `down` runs in another process and cannot).
_restarted: list[subprocess.Popen[bytes]] = []


def _reap_restarted() -> None:
    for proc in _restarted:
        proc.poll()


atexit.register(_reap_restarted)


@dataclass(frozen=True)
class Restart:
    component: str
    old_pid: int
    new_pid: int
    down_s: float  # from the signal until the old process was gone
    ready_s: float  # from the new start until its health endpoint answered 200


def _daemon(state: settings.StateLayout, name: str) -> components.Daemon:
    ports = lifecycle.recorded_ports(state)
    daemons = components.all_daemons(state, ports, pki.Pki(state.pki))
    return next(d for d in daemons if d.name == name)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs.reap_if_child(pid)
        if not procs.is_alive(pid):
            return True
        time.sleep(0.05)
    return False


def restart_component(
    name: str, *, hard: bool = False, downtime: float = 0.0, timeout: float = 90.0
) -> Restart:
    """Restarts one daemon of the local harness cluster in place (same argv, ports, data).

    hard=True is a crash (SIGKILL: open connections are reset, nothing is flushed);
    otherwise a clean SIGTERM stop. Raises if the daemon is not the process `up` recorded.
    """
    state = settings.layout()
    record = procs.read_record(state.run, name)
    if record is None or not procs.is_ours(record):
        raise RuntimeError(f"{name} is not running as recorded in {state.run}")
    started = time.monotonic()
    if hard:
        os.kill(record.pid, signal.SIGKILL)
        if not _wait_gone(record.pid, 10.0):
            raise RuntimeError(f"{name} (pid {record.pid}) survived SIGKILL")
    else:
        procs.stop(record)
    down_s = time.monotonic() - started
    time.sleep(downtime)
    daemon = _daemon(state, name)
    proc, new = procs.start(
        daemon.name, daemon.argv, state.log_of(name), daemon.port, state.run, daemon.env
    )
    _restarted.append(proc)
    tls = {"admin": admin_tls(pki.Pki(state.pki)), "insecure": insecure_tls(), "none": None}[
        daemon.health_tls
    ]
    begun = time.monotonic()
    deadline = begun + timeout
    while get_status(daemon.health_url, tls)[0] != 200:
        if proc.poll() is not None:
            raise RuntimeError(
                f"restarted {name} exited with {proc.returncode}; see {state.log_of(name)}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"restarted {name} not healthy after {timeout:.0f} s")
        time.sleep(0.1)
    return Restart(name, record.pid, new.pid, down_s, time.monotonic() - begun)


def control_plane_works(api: Api, timeout: float = 240.0) -> float:
    """Seconds until a canary Deployment gets a Ready pod: the API server, the controller
    manager (service accounts, Deployments, ReplicaSets), the scheduler and KWOK all act
    again. After an API server crash the harness's controller manager can take over a
    minute: its informers back off after 'forbidden' watch errors while the new API
    server's RBAC cache fills (see docs/reliability.md)."""
    start = time.monotonic()
    name = f"gs-canary-{os.urandom(3).hex()}"
    retrying(lambda: api.core.create_namespace({"metadata": {"name": name}}), "canary ns", timeout)
    labels = {"app": "canary"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "canary"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "pause"}]},
            },
        },
    }
    try:

        def ready() -> bool:
            try:
                api.core.read_namespaced_service_account("default", name)
                api.apps.create_namespaced_deployment(name, deployment)
            except ApiException as exc:
                if exc.status == 404:
                    return False  # no service account yet: pods would be refused
                if exc.status != 409:
                    raise
            pods = api.core.list_namespaced_pod(name, label_selector="app=canary").items
            return any(
                c.type == "Ready" and c.status == "True"
                for p in pods
                for c in (p.status.conditions or [])
            )

        deadline = time.monotonic() + timeout
        while not retrying(ready, "canary", timeout):
            if time.monotonic() > deadline:
                raise TimeoutError(f"control plane not working {timeout:.0f} s after restart")
            time.sleep(0.5)
        return time.monotonic() - start
    finally:
        retrying(lambda: api.core.delete_namespace(name), "delete canary ns")


def component_pid(name: str) -> int | None:
    record = procs.read_record(settings.layout().run, name)
    return record.pid if record is not None and procs.is_ours(record) else None


# --------------------------------------------------------------------------- API access

_TRANSIENT = {0, 429, 500, 502, 503, 504}


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return exc.status in _TRANSIENT
    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def retrying(call: Callable[[], T], what: str, timeout: float = 120.0) -> T:
    """call() until it does not fail with a transport error or a 5xx/429 (an API server
    or etcd outage); other errors propagate at once."""
    deadline = time.monotonic() + timeout
    delay = 0.2
    while True:
        try:
            return call()
        except Exception as exc:
            if not _transient(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 2.0)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: API unavailable for {timeout:.0f} s")


class Api:
    """The calls the suites make. Writes that land twice through a retry are harmless:
    a create answered 409 or a delete answered 404 already happened."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)

    def create_service(self, namespace: str, body: Obj, timeout: float = 120.0) -> None:
        """Creates; if an object of that name is still being deleted, waits for it to go."""
        name = body["metadata"]["name"]
        deadline = time.monotonic() + timeout

        def call() -> bool:
            try:
                self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, SERVICES_PLURAL, body
                )
            except ApiException as exc:
                if exc.status != 409:
                    raise
                try:
                    old = self.custom.get_namespaced_custom_object(
                        GROUP, VERSION, namespace, SERVICES_PLURAL, name
                    )
                except ApiException as gone:
                    if gone.status == 404:
                        return False  # deleted in between: create again
                    raise
                # 409 for our own earlier attempt (a retry) is success; for an object
                # that is terminating, try again once it is gone.
                return not old["metadata"].get("deletionTimestamp")
            return True

        while not retrying(call, f"create {name}"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} still terminating after {timeout:.0f} s")
            time.sleep(0.2)

    def patch_service(self, namespace: str, name: str, patch: Obj) -> None:
        retrying(
            lambda: self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, SERVICES_PLURAL, name, patch
            ),
            f"patch {name}",
        )

    def delete_service(self, namespace: str, name: str) -> None:
        def call() -> None:
            with tolerating(404):
                self.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, SERVICES_PLURAL, name
                )

        retrying(call, f"delete {name}")

    def services(self, namespace: str | None = None) -> list[Obj]:
        def call() -> list[Obj]:
            if namespace is None:
                out = self.custom.list_cluster_custom_object(GROUP, VERSION, SERVICES_PLURAL)
            else:
                out = self.custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, SERVICES_PLURAL
                )
            return list(out["items"])

        return retrying(call, "list services")

    def children(self, namespace: str) -> dict[str, list[Obj]]:
        """Every gpuserve-managed object and gpuserve pod of a namespace, as plain dicts."""

        def call() -> dict[str, list[Obj]]:
            conv = self.api_client.sanitize_for_serialization
            return {
                "ConfigMap": conv(
                    self.core.list_namespaced_config_map(namespace, label_selector=MANAGED).items
                ),
                "Deployment": conv(
                    self.apps.list_namespaced_deployment(namespace, label_selector=MANAGED).items
                ),
                "Service": conv(
                    self.core.list_namespaced_service(namespace, label_selector=MANAGED).items
                ),
                "PodDisruptionBudget": conv(
                    self.policy.list_namespaced_pod_disruption_budget(
                        namespace, label_selector=MANAGED
                    ).items
                ),
                "Pod": conv(
                    self.core.list_namespaced_pod(namespace, label_selector=LABEL_SERVICE).items
                ),
            }

        return retrying(call, f"list children in {namespace}")


# --------------------------------------------------------------------------- the fleet

# Class lists a fleet's services draw from. Every one leaves at least one usable class,
# so each service can end Ready; "ghost" names a class that does not exist.
CLASS_CHOICES: tuple[tuple[str, ...], ...] = (
    ("h100",),
    ("h100", "l4"),
    ("l4", "h100"),
    ("ghost", "h100"),
    ("a100-1g10gb", "h100"),
)
DELAYS_MS = (0, 1, 2, 3, 5, 8)


@dataclass
class Wanted:
    """What the test last asked of one service."""

    name: str
    classes: tuple[str, ...]
    min_replicas: int
    warm_pool: int
    delay_ms: int
    max_batch: int
    # Pods that may outlive a scale-down: without metrics the autoscaler holds the
    # current size (clamped to the bounds), so going from 1 to 0 minReplicas keeps one.
    lingering: int = 0

    @property
    def gpus(self) -> int:
        # A service never runs more than maxReplicas (== max(1, min)) + warmPool pods.
        return max(1, self.min_replicas) + self.warm_pool if self.min_replicas else self.lingering

    def body(self) -> Obj:
        body = valid_service(self.name)
        body["spec"]["accelerators"] = {"classes": list(self.classes)}
        body["spec"]["scaling"] = {
            "minReplicas": self.min_replicas,
            # max == min keeps the hold-without-metrics decision at exactly min.
            "maxReplicas": max(1, self.min_replicas),
            "warmPool": self.warm_pool,
        }
        body["spec"]["batching"] = {
            "maxBatchSize": self.max_batch,
            "preferredBatchSizes": [self.max_batch],
            "maxQueueDelay": f"{self.delay_ms}ms",
        }
        return body

    def patch(self) -> Obj:
        spec = self.body()["spec"]
        return {"spec": {"scaling": spec["scaling"], "batching": spec["batching"]}}


@dataclass(frozen=True)
class Op:
    kind: str  # create | change | delete | recreate
    name: str
    want: Wanted | None = None  # the service as this op leaves it (None: deleted)


@dataclass
class Fleet:
    """A seeded population of services and the random changes made to them.

    `planned` is every service as the ops generated so far leave it, `wanted` as the ops
    applied so far leave it (what the cluster must converge to). Random ops only pick
    services already created. The GPU budget keeps every pod placeable with room for
    rollout surges on the default node pools (16 H100, 4 L4, 7 MIG 1g slices), so
    "converged" can demand Ready."""

    namespace: str
    rng: random.Random
    gpu_budget: int = 12
    planned: dict[str, Wanted] = field(default_factory=dict)
    wanted: dict[str, Wanted] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    serial: int = 0

    def draw(self, name: str) -> Wanted:
        gpus_free = self.gpu_budget - self.gpus()
        with_pods = gpus_free >= 2 and self.rng.random() < 0.3
        return Wanted(
            name=name,
            classes=self.rng.choice(CLASS_CHOICES),
            min_replicas=1 if with_pods else 0,
            warm_pool=1 if with_pods and self.rng.random() < 0.3 else 0,
            delay_ms=self.rng.choice(DELAYS_MS),
            max_batch=self.rng.choice((4, 8, 16)),
        )

    def gpus(self) -> int:
        return sum(w.gpus for w in self.planned.values())

    def next_name(self) -> str:
        self.serial += 1
        return f"svc-{self.serial:04d}"

    def _plan(self, kind: str, name: str, want: Wanted | None) -> Op:
        if want is None:
            self.planned.pop(name, None)
        else:
            self.planned[name] = want
        return Op(kind, name, want)

    def create_op(self) -> Op:
        name = self.next_name()
        return self._plan("create", name, self.draw(name))

    def populate(self, size: int) -> list[Op]:
        return [self.create_op() for _ in range(size)]

    def random_op(self, *, recreate: bool = True) -> Op:
        """recreate=False leaves out deletion plus re-creation under the same name."""
        roll = self.rng.random()
        names = sorted(self.wanted)
        if roll < 0.10 or not names:
            return self.create_op()
        name = self.rng.choice(names)
        if roll < 0.22:
            return self._plan("delete", name, None)
        if roll < 0.30 and recreate:
            # Same name, new object (new uid): old children must not be adopted or kept.
            self.planned.pop(name)
            return self._plan("recreate", name, self.draw(name))
        current = self.wanted[name]
        changed = copy.copy(current)
        if roll < 0.65:
            changed.delay_ms = self.rng.choice([d for d in DELAYS_MS if d != current.delay_ms])
            changed.max_batch = self.rng.choice((4, 8, 16))
        else:
            changed.min_replicas = 0 if current.min_replicas else 1
            changed.warm_pool = 1 if changed.min_replicas and self.rng.random() < 0.3 else 0
            if self.gpus() - current.gpus + changed.gpus > self.gpu_budget:
                changed.min_replicas, changed.warm_pool = 0, 0
            changed.lingering = max(current.lingering, 1 if current.min_replicas else 0)
        return self._plan("change", name, changed)

    def apply(self, api: Api, op: Op) -> None:
        if op.kind == "create":
            assert op.want is not None
            api.create_service(self.namespace, op.want.body())
        elif op.kind == "delete":
            api.delete_service(self.namespace, op.name)
        elif op.kind == "recreate":
            assert op.want is not None
            api.delete_service(self.namespace, op.name)
            api.create_service(self.namespace, op.want.body())
        else:
            assert op.want is not None
            api.patch_service(self.namespace, op.name, op.want.patch())
        if op.want is None:
            self.wanted.pop(op.name, None)
            self.deleted.add(op.name)
        else:
            self.wanted[op.name] = op.want
            self.deleted.discard(op.name)


# --------------------------------------------------------------------------- convergence


def _condition(obj: Obj, type_: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def _owner_uid(obj: Obj) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((r.get("uid") for r in refs if r.get("controller")), None)


def _pod_ready(pod: Obj) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def service_problems(
    svc: Obj,
    children: Mapping[str, list[Obj]],
    classes: Iterable[str] = EXAMPLE_CLASSES,
    *,
    pods: bool = True,
) -> list[str]:
    """How one live service differs from converged: status current and Ready, exactly
    the children it should have, pods = desired serving + warm pool, all rolled.

    pods=False checks only what the operator writes itself (status, children), not what
    the controller manager, scheduler and kubelet (KWOK) make of it."""
    meta = svc["metadata"]
    name, uid, gen = meta["name"], meta["uid"], meta.get("generation")
    status = svc.get("status") or {}
    problems: list[str] = []
    if status.get("observedGeneration") != gen:
        problems.append(
            f"{name}: observedGeneration {status.get('observedGeneration')} != generation {gen}"
        )
    spec = parse_inference_service(svc).spec
    # The model files follow the service's usable classes (vLLM's prefill chunk budget).
    known = {c: k for c, k in example_classes().items() if c in set(classes)}
    wanted_hash = config_hash(spec, {c: known[c] for c in spec.accelerators.classes if c in known})
    if status.get("configHash") != wanted_hash:
        problems.append(f"{name}: status.configHash {status.get('configHash')} != {wanted_hash}")
    usable = [c for c in spec.accelerators.classes if c in set(classes)]
    desired = status.get("desiredReplicas")
    scaling = spec.scaling
    if desired is None or not scaling.min_replicas <= desired <= scaling.max_replicas:
        problems.append(
            f"{name}: desiredReplicas {desired} outside "
            f"[{scaling.min_replicas}, {scaling.max_replicas}]"
        )
        desired = scaling.min_replicas
    mine = {
        kind: [o for o in objs if o["metadata"].get("labels", {}).get(LABEL_SERVICE) == name]
        for kind, objs in children.items()
    }
    singles = {"ConfigMap": config_map_name(name), "Service": name, "PodDisruptionBudget": name}
    for kind, child in singles.items():
        found = [o["metadata"]["name"] for o in mine[kind]]
        if found != [child]:
            problems.append(f"{name}: {kind} objects {found}, want [{child}]")
    replicas = {
        o["metadata"]["name"]: int(o["spec"].get("replicas") or 0) for o in mine["Deployment"]
    }
    found_deps = sorted(replicas)
    # Per usable class: serving priority; and the standby priority while there is a warm
    # pool, or a standby pod still serving (waiting to be relieved).
    want_deps = sorted(
        [deployment_name(name, c) for c in usable]
        + [
            standby_deployment_name(name, c)
            for c in usable
            if scaling.warm_pool or replicas.get(standby_deployment_name(name, c), 0) > 0
        ]
    )
    if found_deps != want_deps:
        problems.append(f"{name}: Deployments {found_deps}, want {want_deps}")
    for kind in ("ConfigMap", "Service", "PodDisruptionBudget", "Deployment"):
        for o in mine[kind]:
            if _owner_uid(o) != uid:
                problems.append(
                    f"{name}: {kind} {o['metadata']['name']} owned by {_owner_uid(o)}, not {uid}"
                )
    total = sum(int(d["spec"].get("replicas") or 0) for d in mine["Deployment"])
    want_pods = desired + scaling.warm_pool
    if total != want_pods:
        problems.append(f"{name}: Deployments want {total} pods, expected {want_pods}")
    for d in mine["Deployment"]:
        got = d["spec"]["template"]["metadata"].get("annotations", {}).get(ANNOTATION_CONFIG_HASH)
        if got != wanted_hash:
            problems.append(f"{name}: Deployment {d['metadata']['name']} has config {got}")
    if pods:
        problems += _pod_problems(svc, mine["Pod"], usable, desired, wanted_hash)
    return problems


def _pod_problems(
    svc: Obj, pods: list[Obj], usable: list[str], desired: int, wanted_hash: str
) -> list[str]:
    name = svc["metadata"]["name"]
    gen = svc["metadata"].get("generation")
    status = svc.get("status") or {}
    warm_pool = int(svc["spec"]["scaling"].get("warmPool", 0))
    problems: list[str] = []
    for type_, want in (("Ready", "True"), ("Stalled", "False"), ("Reconciling", "False")):
        cond = _condition(svc, type_)
        if cond is None or cond.get("status") != want:
            problems.append(
                f"{name}: {type_} is {cond and cond.get('status')} "
                f"({cond and cond.get('message')}), want {want}"
            )
        elif cond.get("observedGeneration") != gen:
            problems.append(f"{name}: {type_} is for generation {cond.get('observedGeneration')}")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if len(live) != desired + warm_pool:
        problems.append(
            f"{name}: {len(live)} pods, expected {desired + warm_pool} "
            f"({desired} serving + {warm_pool} warm)"
        )
    serving = 0
    for pod in live:
        labels = pod["metadata"].get("labels", {})
        pname = pod["metadata"]["name"]
        if labels.get(LABEL_CLASS) not in usable:
            problems.append(f"{name}: pod {pname} of class {labels.get(LABEL_CLASS)}")
        if not _pod_ready(pod):
            problems.append(f"{name}: pod {pname} not Ready")
        if pod["metadata"].get("annotations", {}).get(ANNOTATION_CONFIG_HASH) != wanted_hash:
            problems.append(f"{name}: pod {pname} runs an old config")
        serving += labels.get(LABEL_ROLE) == ROLE_SERVING
    if serving != desired:
        problems.append(f"{name}: {serving} serving pods, want {desired}")
    if status.get("replicas") != desired or status.get("warmReplicas", 0) != warm_pool:
        problems.append(
            f"{name}: status replicas {status.get('replicas')}/"
            f"{status.get('warmReplicas')}, want {desired}/{warm_pool}"
        )
    return problems


def orphan_problems(services: list[Obj], children: Mapping[str, list[Obj]]) -> list[str]:
    """Children (and pods) whose service is gone or is another object of the same name."""
    uids = {s["metadata"]["name"]: s["metadata"]["uid"] for s in services}
    problems = []
    for kind, objs in children.items():
        for o in objs:
            meta = o["metadata"]
            owner = meta.get("labels", {}).get(LABEL_SERVICE)
            if owner not in uids:
                problems.append(f"orphan {kind} {meta['name']} of deleted service {owner}")
            elif kind != "Pod" and _owner_uid(o) != uids[owner]:
                problems.append(
                    f"orphan {kind} {meta['name']}: owner {_owner_uid(o)} "
                    f"is not the live {owner} ({uids[owner]})"
                )
    return problems


def fleet_problems(api: Api, fleet: Fleet, *, pods: bool = True) -> list[str]:
    services = api.services(fleet.namespace)
    children = api.children(fleet.namespace)
    live = {s["metadata"]["name"]: s for s in services}
    problems = []
    if set(live) != set(fleet.wanted):
        problems.append(
            f"services missing {sorted(set(fleet.wanted) - set(live))}, "
            f"unexpected {sorted(set(live) - set(fleet.wanted))}"
        )
    for name, svc in sorted(live.items()):
        want = fleet.wanted.get(name)
        if want is not None:
            scaling = svc["spec"]["scaling"]
            got = (
                scaling["minReplicas"],
                scaling["warmPool"],
                svc["spec"]["batching"]["maxQueueDelay"],
            )
            expect = (want.min_replicas, want.warm_pool, f"{want.delay_ms}ms")
            if got != expect:
                problems.append(f"{name}: spec {got} is not what was applied {expect}")
        problems += service_problems(svc, children, pods=pods)
    if not pods:  # orphans are the garbage collector's to remove, not the operator's
        return problems
    return problems + orphan_problems(services, children)


def wait_converged(
    check: Callable[[], list[str]], timeout: float, interval: float = 1.0
) -> tuple[float, list[str]]:
    """Seconds until check() reports no problem; (elapsed, last problems) on timeout."""
    start = time.monotonic()
    problems = check()
    while problems and time.monotonic() - start < timeout:
        time.sleep(interval)
        problems = check()
    return time.monotonic() - start, problems


# --------------------------------------------------------------------------- API metrics


REPORT_ENV = "GPUSERVE_RELIABILITY_LOG"


def record(figures: dict[str, Any]) -> None:
    """Print a suite's figures; append them to $GPUSERVE_RELIABILITY_LOG when set."""
    line = json.dumps(figures, sort_keys=True)
    print(line)
    target = os.environ.get(REPORT_ENV)
    if target:
        with Path(target).open("a") as out:
            out.write(line + "\n")


def writes_by_resource(
    cluster: ClusterHandle, verbs: tuple[str, ...] = WRITE_VERBS
) -> dict[str, float]:
    """Mutating requests served so far per `resource/subresource` (e.g. `configmaps/`,
    `inferenceservices/status`), from the API server's own metrics."""
    # operatorkit.write_counts keeps the label quotes in its keys ('"configmaps"/""').
    counts = write_counts(cluster, verbs)
    return {key.replace('"', ""): value for key, value in counts.items()}


# --------------------------------------------------------------------------- operator log

# Exceptions a handler may die of while the API server or etcd is away: kopf retries them.
TRANSPORT_ERRORS = re.compile(
    r"(urllib3\.exceptions\.|ConnectionRefusedError|ConnectionResetError|RemoteDisconnected|"
    r"ProtocolError|MaxRetryError|NewConnectionError|ClientConnectorError|"
    r"ServerDisconnectedError|ClientOSError|TimeoutError|"
    r"kubernetes\.client\.exceptions\.\w+: \((?:429|500|502|503|504)\)|"
    r"kubernetes\.dynamic\.exceptions\.\w+: (?:429|500|502|503|504)|"
    r"APITooManyRequestsError|APIServerError)"
)


def tracebacks(log: str) -> list[str]:
    """The final line (exception type and message) of every traceback in a log."""
    found = []
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last):"):
            j = i + 1
            while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
                j += 1
            found.append(lines[j] if j < len(lines) else "(truncated)")
    return found


def unexpected_tracebacks(log: str) -> list[str]:
    return [t for t in tracebacks(log) if not TRANSPORT_ERRORS.search(t)]
