"""Children rendered for a service: placement on GPUs, Triton pods, Service, PDB."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from cli.main import main
from cli.rendering import RenderError, load_documents, render_service, split_manifests
from e2e.invalid_cases import valid_service
from gpuserve.api.models import AcceleratorClassSpec, parse_inference_service
from gpuserve.resources.naming import child_name
from gpuserve.resources.rendering import PoolPlan, RenderInput, render_children

REPO = Path(__file__).resolve().parents[1]
H100 = AcceleratorClassSpec.model_validate({"gpuProduct": "NVIDIA-H100-80GB-HBM3"})
MIG = AcceleratorClassSpec.model_validate(
    {"gpuProduct": "NVIDIA-A100-SXM4-80GB", "mig": {"profile": "3g.40gb"}}
)
MIG_SINGLE = AcceleratorClassSpec.model_validate(
    {"gpuProduct": "NVIDIA-A100-SXM4-40GB", "mig": {"profile": "1g.5gb", "strategy": "single"}}
)


def _render(**pools: int) -> dict[str, dict[str, Any]]:
    body = valid_service("chat")
    body["metadata"].update(namespace="ml", uid="u-1")
    body["spec"]["accelerators"]["classes"] = ["h100", "mig"]
    svc = parse_inference_service(body)
    inp = RenderInput(
        service=svc,
        classes={"h100": H100, "mig": MIG},
        pools={k: PoolPlan(replicas=v) for k, v in pools.items()},
    )
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in render_children(inp)}


def test_children_and_owner_references() -> None:
    objs = _render(h100=2, mig=1)
    # No warm pool and no standby pod wanted: no standby Deployments.
    assert set(objs) == {
        "ConfigMap/chat-triton-config",
        "Deployment/chat-h100",
        "Deployment/chat-mig",
        "Service/chat",
        "PodDisruptionBudget/chat",
    }
    for obj in objs.values():
        owner = obj["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "InferenceService" and owner["uid"] == "u-1" and owner["controller"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuserve"


def test_gpu_placement_fields() -> None:
    objs = _render(h100=2, mig=1)
    h100 = objs["Deployment/chat-h100"]["spec"]
    pod = h100["template"]["spec"]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expr = term["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expr == {
        "key": "nvidia.com/gpu.product",
        "operator": "In",
        "values": ["NVIDIA-H100-80GB-HBM3"],
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert h100["replicas"] == 2
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    mig = objs["Deployment/chat-mig"]["spec"]["template"]["spec"]["containers"][0]
    assert mig["resources"]["limits"] == {"memory": "8Gi", "nvidia.com/mig-3g.40gb": "1"}
    assert "nvidia.com/gpu" not in mig["resources"]["limits"]


def test_single_strategy_mig_requests_gpu_and_matches_product_suffix() -> None:
    assert MIG_SINGLE.resource == "nvidia.com/gpu"
    assert MIG_SINGLE.product_label == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"


def test_pod_security_and_probes() -> None:
    pod = _render(h100=1)["Deployment/chat-h100"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = pod["containers"][0]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert pod["terminationGracePeriodSeconds"] > 30  # above Triton's exit timeout


def test_service_selects_serving_pods_only_and_new_pods_start_warm() -> None:
    objs = _render(h100=1)
    assert objs["Service/chat"]["spec"]["selector"]["gpuserve.io/role"] == "serving"
    labels = objs["Deployment/chat-h100"]["spec"]["template"]["metadata"]["labels"]
    assert labels["gpuserve.io/role"] == "warm"
    selector = objs["Deployment/chat-h100"]["spec"]["selector"]["matchLabels"]
    assert "gpuserve.io/role" not in selector  # flipping the role keeps the pod owned


def test_standby_deployment_runs_the_warm_pool_at_the_lowest_priority() -> None:
    body = valid_service("chat")
    body["metadata"].update(namespace="ml", uid="u-1")
    svc = parse_inference_service(body)
    objs = {
        o["metadata"]["name"]: o
        for o in render_children(
            RenderInput(
                service=svc,
                classes={"h100": H100},
                pools={"h100": PoolPlan(3, surge=False, standby=2, standby_surge=True)},
            )
        )
        if o["kind"] == "Deployment"
    }
    serving, standby = objs["chat-h100"], objs["chat-h100-standby"]
    assert serving["spec"]["replicas"] == 3 and standby["spec"]["replicas"] == 2
    assert serving["spec"]["template"]["spec"]["priorityClassName"] == "gpuserve-interactive"
    assert standby["spec"]["template"]["spec"]["priorityClassName"] == "gpuserve-standby"
    # The serving selector is unchanged (immutable); the standby one adds the pool label,
    # and only standby pods carry it. Both start warm, both roll on a config change.
    assert serving["spec"]["selector"]["matchLabels"] == {
        "gpuserve.io/service": "chat",
        "gpuserve.io/accelerator-class": "h100",
    }
    assert standby["spec"]["selector"]["matchLabels"] == {
        "gpuserve.io/service": "chat",
        "gpuserve.io/accelerator-class": "h100",
        "gpuserve.io/pool": "standby",
    }
    s_tpl, w_tpl = serving["spec"]["template"], standby["spec"]["template"]
    assert "gpuserve.io/pool" not in s_tpl["metadata"]["labels"]
    assert w_tpl["metadata"]["labels"]["gpuserve.io/pool"] == "standby"
    assert s_tpl["metadata"]["labels"]["gpuserve.io/role"] == "warm"
    assert w_tpl["metadata"]["labels"]["gpuserve.io/role"] == "warm"
    assert s_tpl["metadata"]["annotations"] == w_tpl["metadata"]["annotations"]
    assert s_tpl["spec"]["containers"] == w_tpl["spec"]["containers"]
    assert serving["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    assert standby["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 1
    assert standby["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_a_standby_deployment_exists_while_a_warm_pool_or_a_standby_pod_is_wanted() -> None:
    def deployments(warm_pool: int, standby: int) -> set[str]:
        body = valid_service("chat")
        body["metadata"].update(namespace="ml", uid="u-1")
        body["spec"]["scaling"]["warmPool"] = warm_pool
        inp = RenderInput(
            service=parse_inference_service(body),
            classes={"h100": H100},
            pools={"h100": PoolPlan(1, standby=standby)},
        )
        return {o["metadata"]["name"] for o in render_children(inp) if o["kind"] == "Deployment"}

    # A warm pool with no room yet still has its Deployment (at 0 replicas).
    assert deployments(warm_pool=1, standby=0) == {"chat-h100", "chat-h100-standby"}
    # A promoted standby pod serves on until relieved, with or without a warm pool.
    assert deployments(warm_pool=0, standby=1) == {"chat-h100", "chat-h100-standby"}
    assert deployments(warm_pool=0, standby=0) == {"chat-h100"}


def test_config_change_rolls_pods_via_hash() -> None:
    a = _render(h100=1)["Deployment/chat-h100"]["spec"]["template"]["metadata"]["annotations"]
    body = valid_service("chat")
    body["spec"]["batching"]["maxQueueDelay"] = "3ms"
    svc = parse_inference_service(body)
    objs = render_children(
        RenderInput(service=svc, classes={"h100": H100}, pools={"h100": PoolPlan(1)})
    )
    b = objs[1]["spec"]["template"]["metadata"]["annotations"]
    assert a["gpuserve.io/config-hash"] != b["gpuserve.io/config-hash"]


def test_surge_only_when_capacity() -> None:
    svc = parse_inference_service(valid_service("chat"))
    for surge, expected in ((True, 1), (False, 0)):
        objs = render_children(
            RenderInput(
                service=svc, classes={"h100": H100}, pools={"h100": PoolPlan(2, surge=surge)}
            )
        )
        assert objs[1]["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == expected


def test_long_names_are_shortened_stably() -> None:
    long = child_name("a" * 40, "b" * 30)
    assert len(long) <= 52 and long == child_name("a" * 40, "b" * 30)


def test_storage_sources() -> None:
    body = valid_service("chat")
    body["spec"]["model"].update(storageUri="s3://bucket/m", storageSecretRef={"name": "creds"})
    svc = parse_inference_service(body)
    dep = render_children(
        RenderInput(service=svc, classes={"h100": H100}, pools={"h100": PoolPlan(1)})
    )[1]
    init = dep["spec"]["template"]["spec"]["initContainers"][0]
    assert init["envFrom"] == [{"secretRef": {"name": "creds"}}]  # referenced, never copied
    body["spec"]["model"].update(storageUri="pvc://store/models/chat")
    del body["spec"]["model"]["storageSecretRef"]
    dep = render_children(
        RenderInput(
            service=parse_inference_service(body),
            classes={"h100": H100},
            pools={"h100": PoolPlan(1)},
        )
    )[1]
    vols = dep["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "model-files",
        "persistentVolumeClaim": {"claimName": "store", "readOnly": True},
    } in vols


def test_every_example_renders() -> None:
    services, classes = split_manifests(load_documents([REPO / "examples"]))
    assert len(services) >= 4 and {"h100", "l4", "a100-3g40gb", "a100-1g10gb"} <= set(classes)
    for svc in services:
        kinds = [o["kind"] for o in render_service(svc, classes)]
        assert kinds[0] == "ConfigMap" and "Deployment" in kinds


def test_render_names_a_missing_class() -> None:
    svc = parse_inference_service(valid_service("chat"))
    with pytest.raises(RenderError, match="'h100' not found"):
        render_service(svc, {})


def test_render_notes_a_class_it_leaves_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One of three classes mistyped: the rest render, as the operator's would, and the
    left-out class is named rather than dropped without a word."""
    body = yaml.safe_load((REPO / "examples" / "sleeper-interactive.yaml").read_text())
    body["spec"]["accelerators"]["classes"] = ["h100", "L4"]
    manifest = tmp_path / "svc.yaml"
    manifest.write_text(yaml.safe_dump(body))
    # Two class files after one --classes, and the flag repeated: every file is read.
    h100, rest = tmp_path / "h100.yaml", tmp_path / "rest.yaml"
    docs = list(yaml.safe_load_all((REPO / "examples" / "accelerator-classes.yaml").read_text()))
    h100.write_text(yaml.safe_dump_all([d for d in docs if d["metadata"]["name"] == "h100"]))
    rest.write_text(yaml.safe_dump_all([d for d in docs if d["metadata"]["name"] != "h100"]))
    empty = tmp_path / "none.yaml"
    empty.write_text("")
    argv = ["render", "-f", str(manifest), "--classes", str(rest), str(empty)]
    assert main([*argv, "--classes", str(h100)]) == 0
    out = capsys.readouterr()
    assert "AcceleratorClass 'L4' not found: no pool rendered for it" in out.err, out.err
    children = list(yaml.safe_load_all(out.out))
    deployments = [o["metadata"]["name"] for o in children if o["kind"] == "Deployment"]
    assert deployments and all("h100" in d for d in deployments), deployments
    # config.pbtxt reads as the file it is, and round-trips.
    assert "config.pbtxt: |\n" in out.out
    config = next(o for o in children if o["kind"] == "ConfigMap")["data"]["config.pbtxt"]
    assert config.count("\n") > 5 and 'name: "sleeper"' in config


def test_keda_engine_renders_a_scaled_object_and_leaves_replicas_to_it() -> None:
    body = valid_service("chat")
    body["metadata"]["namespace"] = "ml"
    body["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 6, "engine": "keda"}
    svc = parse_inference_service(body)
    objs = render_children(
        RenderInput(
            service=svc,
            classes={"h100": H100},
            pools={"h100": PoolPlan(3)},
            prometheus_url="http://prom:9090",
        )
    )
    by_kind = {o["kind"]: o for o in objs}
    so = by_kind["ScaledObject"]
    assert so["spec"]["scaleTargetRef"]["name"] == "chat-h100"
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (1, 6)
    trigger = so["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus" and 'service="chat"' in trigger["metadata"]["query"]
    assert float(trigger["metadata"]["threshold"]) > 0
    deps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    assert "replicas" not in deps["chat-h100"]["spec"]  # one writer: KEDA
    assert set(deps) == {"chat-h100"}  # no warm pool with KEDA, so no standby Deployment


def test_an_unquoted_compute_capability_says_to_quote_it() -> None:
    """YAML reads computeCapability: 9.0 as a number; "not a valid string" left a newcomer
    guessing."""
    with pytest.raises(ValidationError, match=r'quote it, "9\.0": YAML reads 9\.0 unquoted'):
        AcceleratorClassSpec.model_validate({"gpuProduct": "H", "computeCapability": 9.0})
    with pytest.raises(ValidationError, match=r'quote it, "9\.0": YAML reads 9 unquoted'):
        AcceleratorClassSpec.model_validate({"gpuProduct": "H", "computeCapability": 9})
    spec = AcceleratorClassSpec.model_validate({"gpuProduct": "H", "computeCapability": "9.0"})
    assert spec.supports("fp8")
