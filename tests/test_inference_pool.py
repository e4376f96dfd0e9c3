"""The InferencePool of an LLM service: what it selects and targets, who owns it, and what
status says when the API server has no InferencePool kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from cli.rendering import load_documents, render_service, split_manifests
from controllers import converging, kube, routing
from e2e.invalid_cases import valid_llm_service, valid_service
from gpuserve.api.models import AcceleratorClassSpec, parse_inference_service
from gpuserve.api.status import Condition
from gpuserve.resources import inference_pool
from gpuserve.resources.naming import LABEL_POOL, LABEL_ROLE, POOL_STANDBY, ROLE_SERVING
from gpuserve.resources.rendering import PoolPlan, RenderInput, render_children
from gpuserve.triton.serverargs import HTTP_PORT

REPO = Path(__file__).resolve().parents[1]
H100 = AcceleratorClassSpec.model_validate({"gpuProduct": "NVIDIA-H100-80GB-HBM3"})
NOW = "2026-01-01T00:00:00Z"
Obj = dict[str, Any]


def _children(body: Obj) -> dict[str, Obj]:
    body["metadata"].update(namespace="ml", uid="u-7")
    body["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 4, "warmPool": 1}
    inp = RenderInput(
        service=parse_inference_service(body),
        classes={"h100": H100},
        pools={"h100": PoolPlan(replicas=1, standby=1)},
    )
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in render_children(inp)}


def _matches(selector: Obj, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


@pytest.mark.parametrize("model_format", ["vllm", "tensorrtllm"])
def test_an_llm_service_gets_a_pool_over_its_serving_pods(model_format: str) -> None:
    objs = _children(valid_llm_service("chat", model_format))
    pool = objs["InferencePool/chat"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["metadata"]["namespace"] == "ml"
    owner = pool["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "InferenceService" and owner["uid"] == "u-7" and owner["controller"]
    # The operator's watches select its children by these labels.
    labels = pool["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "gpuserve"
    assert labels["gpuserve.io/service"] == "chat"

    selector = pool["spec"]["selector"]
    assert selector["matchLabels"] == objs["Service/chat"]["spec"]["selector"]
    serving = objs["Deployment/chat-h100"]["spec"]["template"]["metadata"]["labels"]
    standby = objs["Deployment/chat-h100-standby"]["spec"]["template"]["metadata"]["labels"]
    assert standby[LABEL_POOL] == POOL_STANDBY
    # Pods start warm in both Deployments: none is routed until the operator promotes it.
    assert not _matches(selector, serving) and not _matches(selector, standby)
    assert _matches(selector, serving | {LABEL_ROLE: ROLE_SERVING})
    assert _matches(selector, standby | {LABEL_ROLE: ROLE_SERVING})
    assert not _matches(selector, serving | {LABEL_ROLE: ROLE_SERVING, "gpuserve.io/service": "x"})


def test_the_pool_targets_the_port_the_service_sends_inference_to() -> None:
    objs = _children(valid_llm_service("chat"))
    (port,) = objs["InferencePool/chat"]["spec"]["targetPorts"]
    service_http = next(p for p in objs["Service/chat"]["spec"]["ports"] if p["name"] == "http")
    container = objs["Deployment/chat-h100"]["spec"]["template"]["spec"]["containers"][0]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert port == {"number": named[service_http["targetPort"]]} == {"number": HTTP_PORT}


def test_only_llm_formats_get_a_pool() -> None:
    objs = _children(valid_service("resnet"))
    assert not [k for k in objs if k.startswith("InferencePool/")]


def test_the_endpoint_picker_defaults_to_the_service_name_with_epp() -> None:
    ref = _children(valid_llm_service("chat"))["InferencePool/chat"]["spec"]["endpointPickerRef"]
    assert ref == {
        "group": "",
        "kind": "Service",
        "name": "chat-epp",
        "port": {"number": 9002},
        "failureMode": "FailClose",
    }
    long = parse_inference_service(valid_llm_service("a" * 60))
    assert len(inference_pool.endpoint_picker_name(long)) <= 52


def test_the_endpoint_picker_can_be_named_in_the_spec() -> None:
    body = valid_llm_service("chat")
    body["spec"]["llm"]["endpointPicker"] = {
        "name": "shared-picker",
        "port": 9100,
        "failureMode": "FailOpen",
    }
    ref = _children(body)["InferencePool/chat"]["spec"]["endpointPickerRef"]
    assert (ref["name"], ref["port"], ref["failureMode"]) == (
        "shared-picker",
        {"number": 9100},
        "FailOpen",
    )
    body["spec"]["llm"]["endpointPicker"] = {"name": "Not_A_Service"}
    with pytest.raises(ValidationError, match="endpointPicker"):
        parse_inference_service(body)


@pytest.mark.parametrize("example", ["llama-vllm.yaml", "llama-trtllm.yaml"])
def test_render_prints_the_pool_of_the_llm_examples(example: str) -> None:
    paths = [REPO / "examples" / example, REPO / "examples" / "accelerator-classes.yaml"]
    services, classes = split_manifests(load_documents(paths))
    (svc,) = services
    pools = [o for o in render_service(svc, classes) if o["kind"] == "InferencePool"]
    assert [p["metadata"]["name"] for p in pools] == [svc.metadata.name]


# --------------------------------------------------------------- status without the kind
def _llm() -> Any:
    body = valid_llm_service("chat")
    body["metadata"]["namespace"] = "ml"
    return parse_inference_service(body)


def test_status_says_the_pool_is_skipped_once_and_applied_again() -> None:
    svc = _llm()
    pool = inference_pool.inference_pool_spec(svc)
    skipped = [{"kind": "InferencePool", "spec": pool}]
    conds = routing.set_pool_condition([], svc, skipped, generation=3, now=NOW)
    (cond,) = conds
    assert (cond.type, cond.status, cond.reason) == (
        "InferencePoolApplied",
        "False",
        "CRDNotInstalled",
    )
    assert "does not serve InferencePool" in cond.message
    assert routing.pool_event(None, conds) == ("Warning", "InferencePoolSkipped", cond.message)
    # Still skipped on the next reconcile: no second event, no transition.
    again = routing.set_pool_condition(conds, svc, skipped, generation=3, now="later")
    assert routing.pool_event("False", again) is None
    assert again[0].last_transition_time == NOW
    applied = routing.set_pool_condition(again, svc, [], generation=3, now="later")
    assert (applied[0].status, applied[0].reason) == ("True", "Applied")
    assert "chat-epp:9002" in applied[0].message
    assert routing.pool_event("False", applied) is None


def test_a_service_without_a_pool_carries_no_pool_condition() -> None:
    svc = parse_inference_service(valid_service("resnet"))
    stale = Condition(type="InferencePoolApplied", status="True", reason="Applied")
    ready = Condition(type="Ready", status="True", reason="ServingPodsReady")
    assert routing.set_pool_condition([ready, stale], svc, [], generation=1, now=NOW) == [ready]


def test_an_unserved_pool_is_left_out_of_the_apply_and_other_kinds_never_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def serves(api_version: str, kind: str) -> bool:
        asked.append(kind)
        return False

    monkeypatch.setattr(kube, "serves", serves)
    children = list(_children(valid_llm_service("chat")).values())
    kept, skipped = converging._servable(children)
    assert [c["kind"] for c in skipped] == ["InferencePool"]
    assert [c["kind"] for c in kept] == [c["kind"] for c in children if c not in skipped]
    assert asked == ["InferencePool"]  # required kinds are applied without asking


def test_a_missing_kind_is_asked_about_again_only_after_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lookups: list[str] = []
    clock = [1000.0]
    installed = [False]

    def resource(api_version: str, kind: str) -> object:
        lookups.append(kind)
        if not installed[0]:
            raise kube.KindNotServed(api_version, kind)
        return object()

    monkeypatch.setattr(kube, "_resource", resource)
    monkeypatch.setattr(kube.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(kube, "_unserved", {})
    version = inference_pool.API_VERSION
    assert not kube.serves(version, "InferencePool")
    assert not kube.serves(version, "InferencePool")
    assert len(lookups) == 1  # discovery is re-read at most once a minute
    installed[0] = True
    clock[0] += kube.UNSERVED_RECHECK_S
    assert kube.serves(version, "InferencePool")
    assert kube.serves(version, "InferencePool")
    assert len(lookups) == 3  # a served kind is found in the client's discovery cache


@pytest.mark.parametrize(
    ("body", "gone"),
    [
        ("404 page not found", True),  # the group is gone (its CRD deleted)
        ('{"kind":"Status","message":"the server could not find the requested resource"}', True),
        ('{"kind":"Status","message":"namespaces \\"ml\\" not found"}', False),
    ],
)
def test_a_404_says_whether_the_kind_itself_is_gone(body: str, gone: bool) -> None:
    exc = kube.ApiException(status=404, reason="Not Found")
    exc.body = body
    assert kube._kind_gone(exc) is gone
