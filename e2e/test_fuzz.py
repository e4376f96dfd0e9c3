"""Fuzz: near-valid InferenceService and AcceleratorClass bodies against the real API server.

Hypothesis mutates valid bodies (wrong types, out-of-range numbers, odd strings, huge
lists, missing and unknown fields, odd object names) of every field of the schema
(e2e/fuzz_fields.py reads them from the CRD the models generate) and creates each with
fieldValidation=Strict. Every input must be either rejected with a message that names a
field, or accepted and reconciled: a status for the current generation with a Ready
condition, and Stalled with a reason when it cannot run. The operator must stay alive, log
no traceback, and not retry in a storm (its writes are counted from the API server's
metrics). GPUSERVE_FUZZ_EXAMPLES (default 60) bounds the inputs per kind; GPUSERVE_FUZZ_SEED
replays a run (the seed is printed). Figures go to $GPUSERVE_RELIABILITY_LOG when set.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.chaoskit import record, unexpected_tracebacks, writes_by_resource
from e2e.cluster.testkit import ClusterHandle, tolerating, wait_for
from e2e.fuzz_fields import CLASS, SERVICE, base_body, fuzz_table, mutate
from e2e.operatorkit import OperatorProcess, operator_with_classes, settle
from gpuserve.api.models import GROUP, VERSION
from gpuserve.resources.naming import CLASSES_PLURAL, SERVICES_PLURAL

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]
EXAMPLES = int(os.environ.get("GPUSERVE_FUZZ_EXAMPLES", "60"))
SEED = int(os.environ.get("GPUSERVE_FUZZ_SEED", str(random.SystemRandom().randrange(2**32))))
RECONCILE_TIMEOUT_S = 90.0
QUIET_WINDOW_S = 20.0
# Writes per accepted object the operator may send in the quiet window (a failing object
# is retried about once a minute; a storm is many per second).
MAX_QUIET_WRITES_PER_OBJECT = 2.0
OPERATOR_RESOURCES = (
    "configmaps/", "deployments/", "services/", "poddisruptionbudgets/", "pods/",
    f"{SERVICES_PLURAL}/status", f"{CLASSES_PLURAL}/status",
)
# A rejection names the field: `spec.batching.maxBatchSize: Invalid value`, `unknown
# field "spec.x"` (x may be any unicode), `metadata.name: Invalid value`, or for metadata
# of the wrong JSON type, `Go struct field ObjectMeta.labels of type ...`.
# A top-level unknown field ("specTypo") is named bare by strict decoding.
FIELD_IN_MESSAGE = re.compile(
    r"\b(spec|metadata)(\.|\[|: | in body)|ObjectMeta\.|unknown field \"\w+"
)

# --------------------------------------------------------------------------- strategies

ODD_STRINGS = [
    "", " ", "0", "-1", "1e3", "null", "true", "NaN", "ms", "-1ms", "1.5ms", "0ms",
    "2000000h", "1h1m1s", "../../etc", "${HOME}", "a/b", "a b", "ÄÖÜ", "模型", "\u200b",
    "line\nbreak", "tab\t", "'quote\"", "x" * 64, "x" * 300, "y" * 5000,
]
ODD_INTS = [-(2**63), -(2**31), -1, 0, 1, 2, 7, 8, 15, 16, 17, 63, 64, 65, 97, 100, 1000,
            1001, 4096, 4097, 65536, 2**31, 2**53, 2**63 - 1]

scalars = st.one_of(
    st.sampled_from(ODD_STRINGS),
    st.text(max_size=40),
    st.sampled_from(ODD_INTS),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.booleans(),
    st.none(),
)
odd_values = st.one_of(
    scalars,
    st.lists(scalars, max_size=5),
    st.lists(st.integers(min_value=1, max_value=16), min_size=17, max_size=2000),  # huge
    st.lists(st.sampled_from(["h100", "l4", "h100", "x" * 70]), min_size=0, max_size=12),
    st.dictionaries(st.text(max_size=12), scalars, max_size=4),
)

# Object names: the API server takes any DNS subdomain (dots, 253 characters, a leading
# digit) for a custom resource, but a Service (child) needs a DNS label starting with a letter.
ODD_NAMES = ["my.model", "9lives", "x" * 52, "x" * 63, "x" * 64, "a" * 253, "UPPER",
             "-dash", "under_score", "ok"]

@dataclass(frozen=True)
class Mutation:
    path: str
    action: str  # set | drop | unknown
    value: Any


def mutations(paths: dict[str, list[Any]]) -> st.SearchStrategy[list[Mutation]]:
    def one(path: str) -> st.SearchStrategy[Mutation]:
        near = st.sampled_from(paths[path] or [None])
        # Mostly near-valid: values from the field's own list three times in four.
        return st.builds(Mutation, st.just(path),
                         st.sampled_from(["set", "set", "set", "set", "drop", "unknown"]),
                         st.one_of(near, near, near, odd_values))

    return st.lists(st.sampled_from(sorted(paths)).flatmap(one), min_size=1, max_size=2)


# --------------------------------------------------------------------------- harness


@dataclass
class Tally:
    tried: int = 0
    accepted: list[tuple[str, str | None, list[Mutation]]] = field(default_factory=list)
    rejected: int = 0
    failures: list[str] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message", exc.body))
    except (TypeError, ValueError):
        return str(exc.body)


def submit(custom: client.CustomObjectsApi, namespace: str | None, body: Obj,
           tally: Tally, muts: list[Mutation]) -> None:
    tally.tried += 1
    plural = SERVICES_PLURAL if namespace else CLASSES_PLURAL
    try:
        if namespace:
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body,
                                                   field_validation="Strict")
        else:
            custom.create_cluster_custom_object(GROUP, VERSION, plural, body,
                                                field_validation="Strict")
    except ApiException as exc:
        message = _message(exc)
        if exc.status == 409:  # a repeated odd name: nothing new to learn
            tally.tried -= 1
            return
        tally.rejected += 1
        if exc.status not in (400, 422) or not FIELD_IN_MESSAGE.search(message):
            tally.failures.append(f"rejected with {exc.status} without naming a field: "
                                  f"{message[:300]} (mutations {muts})")
        return
    name = body.get("metadata", {}).get("name", "")
    tally.accepted.append((name, namespace, muts))


def reconciled(obj: Obj) -> str | None:
    """None if the status is a verdict on the current generation; else what is missing."""
    status = obj.get("status") or {}
    gen = obj["metadata"].get("generation")
    if status.get("observedGeneration") != gen:
        return f"observedGeneration {status.get('observedGeneration')} != {gen}"
    conds = {c["type"]: c for c in status.get("conditions") or []}
    if "Ready" not in conds:
        return "no Ready condition"
    if obj["kind"] == "InferenceService":
        stalled = conds.get("Stalled")
        if stalled is None or "Reconciling" not in conds:
            return "no Stalled/Reconciling conditions"
        if stalled["status"] == "True" and not stalled.get("reason"):
            return "Stalled without a reason"
    return None


def verdicts(custom: client.CustomObjectsApi, tally: Tally) -> dict[str, str]:
    """What is still missing, per accepted object (empty when all are reconciled)."""
    missing: dict[str, str] = {}
    for name, namespace, _ in tally.accepted:
        try:
            if namespace:
                obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace,
                                                          SERVICES_PLURAL, name)
            else:
                obj = custom.get_cluster_custom_object(GROUP, VERSION, CLASSES_PLURAL,
                                                       name)
        except ApiException as exc:
            missing[name] = f"cannot read it back: {exc.status}"
            continue
        why = reconciled(obj)
        if why:
            missing[name] = why
        else:
            cond = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
            reason = f"{obj['kind']}/Ready={cond['status']}/{cond.get('reason')}"
            tally.reasons[reason] = tally.reasons.get(reason, 0) + 1
    return missing


def operator_writes(cluster: ClusterHandle) -> float:
    # DELETE is left out: the namespace controller emptying an earlier test's namespace
    # would count, and the operator's only deletion (retiring a pool) cannot repeat.
    counts = writes_by_resource(cluster, verbs=("POST", "PUT", "PATCH", "APPLY"))
    return sum(counts.get(k, 0.0) for k in OPERATOR_RESOURCES)


@pytest.fixture(scope="module")
def operator(cluster: ClusterHandle,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    yield from operator_with_classes(cluster, tmp_path_factory.mktemp("fuzz"))


def _drain_services(custom: client.CustomObjectsApi, namespace: str) -> None:
    """Deletes the namespace's services while the operator runs, so their deletion is
    part of what the suite watches the operator survive."""
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                 SERVICES_PLURAL)["items"]
    for obj in items:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, SERVICES_PLURAL,
                                               obj["metadata"]["name"])
    wait_for(lambda: not custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, SERVICES_PLURAL)["items"], 90, "fuzzed services gone")


def _delete_classes(custom: client.CustomObjectsApi, names: list[str]) -> None:
    for name in names:
        with tolerating(404):
            custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES_PLURAL, name)

    def gone() -> bool:
        items = custom.list_cluster_custom_object(GROUP, VERSION, CLASSES_PLURAL)["items"]
        return not {o["metadata"]["name"] for o in items} & set(names)

    wait_for(gone, 90, "fuzzed AcceleratorClasses gone")


def run_fuzz(kind: str, cluster: ClusterHandle, operator: OperatorProcess,
             namespace: str) -> None:
    custom = client.CustomObjectsApi(cluster.api_client())
    tally = Tally()
    serial = iter(range(1, 1_000_000))
    paths = fuzz_table(kind)
    writes_before = operator_writes(cluster)
    log_start = len(operator.log_text())
    started = time.monotonic()

    def build(muts: list[Mutation], odd_name: str | None) -> Obj:
        n = next(serial)
        if kind == SERVICE:
            body = base_body(kind, odd_name or f"fz-{n}")
        else:
            # Class names stay ours: a fuzzed class named like a real one would change
            # what every other service in the cluster runs on.
            body = base_body(kind, f"fz-{SEED % 100000}-{n}")
        for m in muts:
            mutate(body, m.path, m.action, m.value)
        return body

    names = st.one_of(st.none(), st.none(), st.none(), st.sampled_from(ODD_NAMES))

    @seed(SEED)
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(muts=mutations(paths), odd_name=names if kind == SERVICE else st.none())
    def one_input(muts: list[Mutation], odd_name: str | None) -> None:
        body = build(muts, odd_name)
        submit(custom, namespace if kind == SERVICE else None, body, tally, muts)
        # Checked per input so hypothesis reports the first input that kills it.
        assert operator.alive(), f"operator died after {muts}: {operator.log_tail()}"

    try:
        one_input()
        deadline = time.monotonic() + RECONCILE_TIMEOUT_S
        missing = verdicts(custom, tally)
        while missing and time.monotonic() < deadline:
            time.sleep(1.0)
            tally.reasons.clear()
            missing = verdicts(custom, tally)
        reconcile_s = time.monotonic() - started
        # A retry storm shows as writes that keep coming once every verdict is in.
        settle(3)
        quiet_before = operator_writes(cluster)
        settle(QUIET_WINDOW_S)
        quiet_writes = operator_writes(cluster) - quiet_before
        total_writes = operator_writes(cluster) - writes_before
        accepted = len(tally.accepted)
        record({"suite": "fuzz", "kind": kind, "seed": SEED, "tried": tally.tried,
                "accepted": accepted, "rejected": tally.rejected,
                "verdicts": dict(sorted(tally.reasons.items())),
                "seconds": round(reconcile_s, 1), "writes_total": total_writes,
                "writes_in_quiet_window": quiet_writes})
        assert not tally.failures, "\n".join(tally.failures[:10])
        details = [f"{n}: {why}; mutations {[m for a, _, m in tally.accepted if a == n]}"
                   for n, why in missing.items()]
        assert not missing, f"accepted, not reconciled (seed {SEED}):\n" + "\n".join(details)
        assert quiet_writes <= MAX_QUIET_WRITES_PER_OBJECT * max(accepted, 1), (
            f"{quiet_writes} operator writes in {QUIET_WINDOW_S:.0f} s after reconciling "
            f"{accepted} objects: a retry storm")
        assert operator.alive()
        unexpected = unexpected_tracebacks(operator.log_text()[log_start:])
        assert not unexpected, f"operator tracebacks (seed {SEED}):\n" + "\n".join(unexpected)
    finally:
        if kind == SERVICE:
            _drain_services(custom, namespace)
        else:
            _delete_classes(custom, [n for n, ns, _ in tally.accepted if ns is None])


def test_fuzzed_inference_services_are_rejected_or_reconciled(
    cluster: ClusterHandle, operator: OperatorProcess, namespace: str
) -> None:
    run_fuzz(SERVICE, cluster, operator, namespace)


def test_fuzzed_accelerator_classes_are_rejected_or_reconciled(
    cluster: ClusterHandle, operator: OperatorProcess, namespace: str
) -> None:
    run_fuzz(CLASS, cluster, operator, namespace)


# Inputs the fuzzer found that the API server accepts but the Kubernetes objects the
# operator renders from them are invalid. Each must be rejected at admission (naming the
# field) or end Stalled with a reason; today each ends with no status and a traceback.
FOUND: list[tuple[str, Callable[[Obj], None]]] = [
    ("dotted-name", lambda b: b["metadata"].update(name="my.model")),
    ("digit-first-name", lambda b: b["metadata"].update(name="9lives")),
    ("64-char-name", lambda b: b["metadata"].update(name="x" * 64)),
    ("cpu-not-a-quantity", lambda b: b["spec"].update(triton={"resources": {"cpu": "lots"}})),
    ("toleration-seconds-without-noexecute", lambda b: b["spec"].update(
        triton={"pod": {"tolerations": [{"key": "a", "tolerationSeconds": 5}]}})),
    ("node-selector-bad-key", lambda b: b["spec"].update(
        triton={"pod": {"nodeSelector": {"bad key!": "v"}}})),
    ("service-account-bad-name", lambda b: b["spec"].update(
        triton={"pod": {"serviceAccountName": "Bad_SA"}})),
]


@pytest.mark.parametrize(("case", "mutate"), FOUND, ids=[c for c, _ in FOUND])
def test_fuzz_found_input_is_rejected_or_stalled(
    cluster: ClusterHandle, operator: OperatorProcess, namespace: str, case: str,
    mutate: Callable[[Obj], None],
) -> None:
    custom = client.CustomObjectsApi(cluster.api_client())
    body = base_body(SERVICE, f"found-{case}"[:40])
    mutate(body)
    name = body["metadata"]["name"]
    log_start = len(operator.log_text())
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, SERVICES_PLURAL,
                                               body, field_validation="Strict")
    except ApiException as exc:
        assert exc.status == 422 and FIELD_IN_MESSAGE.search(_message(exc)), _message(exc)
        return
    try:
        def verdict() -> Obj | None:
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace,
                                                      SERVICES_PLURAL, name)
            return obj if reconciled(obj) is None else None

        obj = wait_for(verdict, 30, f"a status verdict on {case}")
        stalled = next(c for c in obj["status"]["conditions"] if c["type"] == "Stalled")
        assert stalled["status"] == "True" and stalled["reason"], stalled
        assert operator.alive()
        new_log = operator.log_text()[log_start:]
        assert not unexpected_tracebacks(new_log), unexpected_tracebacks(new_log)[:3]
    finally:
        _drain_services(custom, namespace)
