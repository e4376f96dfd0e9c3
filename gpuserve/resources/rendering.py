"""Render the children of an InferenceService as plain dicts.

One ConfigMap holds config.pbtxt (and vLLM's model.json); each allowed AcceleratorClass
gets two Deployments of Triton pods, a serving one at the tier's PriorityClass and a
standby one (the warm pool) at ``gpuserve-standby``, which serving pods may preempt; one
Service selects the serving pods of all pools; one PodDisruptionBudget guards them; an LLM
service also gets an InferencePool over the same pods, for gateways that route by prefix. The
output is what server-side apply sends: only fields gpuserve owns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuserve.api.models import (
    AcceleratorClassSpec,
    InferenceService,
    InferenceServiceSpec,
    default_triton_image,
)
from gpuserve.autoscaling.query_windows import DEFAULT_SCRAPE_INTERVAL_S
from gpuserve.llm.from_spec import rendered_batched_tokens
from gpuserve.llm.keda_mix import KedaTokenMix
from gpuserve.placement.planning import PoolsPlan
from gpuserve.resources import inference_pool
from gpuserve.resources.keda import scaled_object
from gpuserve.resources.naming import (
    ANNOTATION_CONFIG_HASH,
    LABEL_CLASS,
    LABEL_POOL,
    LABEL_ROLE,
    LABEL_SERVICE,
    POOL_STANDBY,
    ROLE_ROUTED_AROUND,
    ROLE_SERVING,
    ROLE_WARM,
    STANDBY_PRIORITY_CLASS,
    common_labels,
    config_map_name,
    deployment_name,
    priority_class_name,
    serving_pod_labels,
    short_hash,
    standby_deployment_name,
)
from gpuserve.resources.storage import model_volumes
from gpuserve.triton.modelconfig import render_model_files
from gpuserve.triton.serverargs import GRPC_PORT, HTTP_PORT, METRICS_PORT, server_args

Obj = dict[str, Any]

GPU_TAINT_KEY = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class PoolPlan:
    """How many pods one class's serving and standby Deployments run, and whether their
    rollouts may surge."""

    replicas: int
    surge: bool = False
    standby: int = 0
    standby_surge: bool = False


def pool_plans(plan: PoolsPlan, order: Sequence[str]) -> dict[str, PoolPlan]:
    """The placement plan as what each class's two Deployments render."""
    return {
        c: PoolPlan(
            replicas=plan.serving[c],
            surge=plan.surge[c],
            standby=plan.standby[c],
            standby_surge=plan.standby_surge[c],
        )
        for c in order
    }


@dataclass(frozen=True)
class RenderInput:
    service: InferenceService
    classes: Mapping[str, AcceleratorClassSpec]
    pools: Mapping[str, PoolPlan] = field(default_factory=dict)
    # Operator-wide pod labels (e.g. for a service mesh, or the local harness's readiness
    # hook); they never override gpuserve's own labels.
    extra_pod_labels: Mapping[str, str] = field(default_factory=dict)
    # Where KEDA's Prometheus trigger reads from (engine: keda), and how often that
    # Prometheus scrapes (the trigger's rate() range holds the samples it needs).
    prometheus_url: str = "http://prometheus.monitoring:9090"
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL_S
    # Measured / stated execution time the KEDA threshold is sized for (status.kedaCalibration).
    keda_service_scale: float = 1.0
    # The measured token mix an LLM service's KEDA thresholds are sized for
    # (status.kedaTokenMix); None: the stated one.
    keda_token_mix: KedaTokenMix | None = None


def _owner(service: InferenceService) -> Obj:
    return {
        "apiVersion": service.api_version,
        "kind": service.kind,
        "name": service.metadata.name,
        "uid": service.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(
    service: InferenceService, name: str, extra_labels: Mapping[str, str] | None = None
) -> Obj:
    labels = common_labels(service.metadata.name) | dict(extra_labels or {})
    meta: Obj = {"name": name, "labels": labels}
    if service.metadata.namespace:
        meta["namespace"] = service.metadata.namespace
    if service.metadata.uid:
        meta["ownerReferences"] = [_owner(service)]
    return meta


def model_files(
    spec: InferenceServiceSpec, classes: Mapping[str, AcceleratorClassSpec]
) -> dict[str, str]:
    """The model's files for pods of ``classes``: vLLM's prefill chunk budget follows the
    engine costs of the slowest of them (gpuserve.llm.chunking)."""
    return render_model_files(spec, rendered_batched_tokens(spec, classes))


def config_map(service: InferenceService, classes: Mapping[str, AcceleratorClassSpec]) -> Obj:
    """The model's files: config.pbtxt, and vLLM's model.json."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(service, config_map_name(service.metadata.name)),
        "data": model_files(service.spec, classes),
    }


def config_hash(spec: InferenceServiceSpec, classes: Mapping[str, AcceleratorClassSpec]) -> str:
    """Changes with any model file, so a change rolls the pods. A lone config.pbtxt hashes
    as before model.json existed: upgrading the operator rolls no pod."""
    files = model_files(spec, classes)
    if list(files) == ["config.pbtxt"]:
        return short_hash(files["config.pbtxt"])
    return short_hash("\n".join(f"{name}\n{text}" for name, text in sorted(files.items())))


def _affinity(accel: AcceleratorClassSpec) -> Obj:
    expressions = [{"key": PRODUCT_LABEL, "operator": "In", "values": [accel.product_label]}]
    expressions += [
        {"key": key, "operator": "In", "values": [value]}
        for key, value in sorted(accel.node_labels.items())
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def _tolerations(spec: InferenceServiceSpec) -> list[Obj]:
    tolerations: list[Obj] = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    for t in spec.triton.pod.tolerations:
        tolerations.append(t.model_dump(by_alias=True, exclude_none=True))
    return tolerations


def _probe(path: str, *, period: int, failures: int) -> Obj:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 2,
    }


def _container(service: InferenceService, accel: AcceleratorClassSpec) -> Obj:
    spec = service.spec
    res = spec.triton.resources
    gpus = str(spec.accelerators.gpus_per_pod)
    volumes_mounts = model_volumes(spec, service.metadata.name).mounts
    container: Obj = {
        "name": "triton",
        "image": spec.triton.image or default_triton_image(spec.model.format),
        "args": server_args(spec),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": {
            "requests": {"cpu": res.cpu, "memory": res.memory, accel.resource: gpus},
            "limits": {"memory": res.memory, accel.resource: gpus},
        },
        # Ready means the model is loaded (strict readiness); startup allows slow loads.
        "startupProbe": _probe("/v2/health/ready", period=10, failures=60),
        "readinessProbe": _probe("/v2/health/ready", period=5, failures=2),
        "livenessProbe": _probe("/v2/health/live", period=10, failures=3),
        "volumeMounts": volumes_mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if spec.is_llm:
        # The engines write compile and kernel caches under $HOME; the root is read-only.
        container["env"] = [{"name": "HOME", "value": "/tmp"}]
    return container


def deployment(
    service: InferenceService,
    class_name: str,
    accel: AcceleratorClassSpec,
    plan: PoolPlan,
    extra_pod_labels: Mapping[str, str] | None = None,
    *,
    files_hash: str,
    standby: bool = False,
) -> Obj:
    """The serving Deployment of a class, or with ``standby`` its warm-pool Deployment;
    ``files_hash``: the model files' ``config_hash``, which rolls the pods when it changes.

    Both differ only in name, priority, replicas and the pool label; the serving one's
    selector has no pool label (selectors are immutable, and it predates the standby
    pool), so it also matches standby pods, which its ReplicaSets never adopt: they are
    owned by the standby Deployment's ReplicaSet, whose pod-template-hash differs."""
    spec = service.spec
    name = service.metadata.name
    selector = {LABEL_SERVICE: name, LABEL_CLASS: class_name}
    if standby:
        selector[LABEL_POOL] = POOL_STANDBY
    # New pods start out of the Service; the operator promotes them once their model is
    # loaded, so warm-pool standby and cold start share one path.
    pod_labels = (
        dict(sorted((extra_pod_labels or {}).items()))
        | common_labels(name)
        | selector
        | {LABEL_ROLE: ROLE_WARM}
    )
    storage = model_volumes(spec, name)
    pod_spec: Obj = {
        "priorityClassName": STANDBY_PRIORITY_CLASS if standby else priority_class_name(spec.tier),
        "terminationGracePeriodSeconds": spec.triton.exit_timeout_seconds + 15,
        "affinity": _affinity(accel),
        "tolerations": _tolerations(spec),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "enableServiceLinks": False,
        "initContainers": storage.init_containers,
        "containers": [_container(service, accel)],
        "volumes": storage.volumes,
    }
    pod = spec.triton.pod
    if pod.node_selector:
        pod_spec["nodeSelector"] = dict(sorted(pod.node_selector.items()))
    if pod.service_account_name:
        pod_spec["serviceAccountName"] = pod.service_account_name
    if pod.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s.name} for s in pod.image_pull_secrets]
    if not pod_spec["initContainers"]:
        del pod_spec["initContainers"]
    # Surge only where the placement found a free GPU; otherwise replace in place so a
    # rollout on full GPU nodes can never deadlock.
    surge = plan.standby_surge if standby else plan.surge
    strategy = (
        {"maxSurge": 1, "maxUnavailable": 0} if surge else {"maxSurge": 0, "maxUnavailable": 1}
    )
    dep_name = (standby_deployment_name if standby else deployment_name)(name, class_name)
    dep_labels = {LABEL_CLASS: class_name} | ({LABEL_POOL: POOL_STANDBY} if standby else {})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(service, dep_name, dep_labels),
        "spec": {
            "replicas": plan.standby if standby else plan.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": strategy},
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {ANNOTATION_CONFIG_HASH: files_hash},
                },
                "spec": pod_spec,
            },
        },
    }


def _serving_child(service: InferenceService, api_version: str, kind: str, spec: Obj) -> Obj:
    """A child named after the service whose spec selects its serving pods."""
    name = service.metadata.name
    return {"apiVersion": api_version, "kind": kind, "metadata": _meta(service, name), "spec": spec}


def _serving_pods(service: InferenceService) -> dict[str, str]:
    return serving_pod_labels(service.metadata.name)


def service_object(service: InferenceService) -> Obj:
    ports = [
        {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
        {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
    ]
    spec = {"type": "ClusterIP", "selector": _serving_pods(service), "ports": ports}
    return _serving_child(service, "v1", "Service", spec)


def disruption_budget(service: InferenceService) -> Obj:
    # Every serving pod, in routing or routed around while it clears its queue: an
    # eviction of the latter would fail the requests waiting in it.
    selector = {
        "matchLabels": {LABEL_SERVICE: service.metadata.name},
        "matchExpressions": [
            {"key": LABEL_ROLE, "operator": "In", "values": [ROLE_SERVING, ROLE_ROUTED_AROUND]}
        ],
    }
    spec = {"maxUnavailable": 1, "selector": selector}
    return _serving_child(service, "policy/v1", "PodDisruptionBudget", spec)


def inference_pool_object(service: InferenceService) -> Obj | None:
    """LLM services only: what a gateway's endpoint picker routes by (docs/routing.md)."""
    spec = inference_pool.inference_pool_spec(service)
    if spec is None:
        return None
    return _serving_child(service, inference_pool.API_VERSION, inference_pool.KIND, spec)


def render_children(inp: RenderInput) -> list[Obj]:
    """Every child object, in apply order (config before the pods that mount it)."""
    svc = inp.service
    children = [config_map(svc, inp.classes)]
    files_hash = config_hash(svc.spec, inp.classes)
    keda_target: str | None = None
    for class_name in svc.spec.accelerators.classes:
        accel = inp.classes.get(class_name)
        if accel is None:
            continue
        plan = inp.pools.get(class_name, PoolPlan(replicas=0))
        dep = deployment(svc, class_name, accel, plan, inp.extra_pod_labels, files_hash=files_hash)
        if svc.spec.scaling.engine == "keda" and keda_target is None:
            # KEDA owns this Deployment's replica count; gpuserve must not apply it.
            keda_target = class_name
            del dep["spec"]["replicas"]
            so = scaled_object(
                svc,
                class_name,
                accel,
                inp.prometheus_url,
                inp.scrape_interval,
                service_scale=inp.keda_service_scale,
                classes=inp.classes,
                token_mix=inp.keda_token_mix,
            )
            so["metadata"] = _meta(svc, svc.metadata.name)
            children.append(so)
        children.append(dep)
        # No warm pool and no standby pod wanted: no standby Deployment either (an empty
        # one still costs the controller manager a ReplicaSet and status updates). The
        # operator retires the one that is no longer rendered. An auto-sized pool keeps
        # its Deployment, so a pool that comes and goes is only a replica count.
        if plan.standby or svc.spec.scaling.warm_pool or svc.spec.scaling.warm_pool_mode == "auto":
            children.append(
                deployment(
                    svc,
                    class_name,
                    accel,
                    plan,
                    inp.extra_pod_labels,
                    files_hash=files_hash,
                    standby=True,
                )
            )
    children.append(service_object(svc))
    children.append(disruption_budget(svc))
    pool = inference_pool_object(svc)
    if pool is not None:
        children.append(pool)
    return children


def endpoint(service: InferenceService) -> str:
    ns = service.metadata.namespace or "default"
    return f"{service.metadata.name}.{ns}.svc:{GRPC_PORT}"
