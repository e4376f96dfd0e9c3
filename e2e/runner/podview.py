"""What the runner needs to know about one pod, read from its API object (pure).

The operator renders the Triton container's args, the ConfigMap volume ``model-config`` (mounted
at ``/models/<model>/config.pbtxt``) and the version directory ``/models/<model>/<version>``;
everything the runner does is derived from those, so it serves what the pod would serve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from e2e.cluster.readiness import EXTERNAL, READINESS_LABEL
from gpuserve.resources.naming import LABEL_CLASS, LABEL_ROLE, LABEL_SERVICE, ROLE_SERVING

CONFIG_VOLUME = "model-config"
MODEL_FILES_VOLUME = "model-files"
TRITON_CONTAINER = "triton"


@dataclass(frozen=True)
class PodView:
    """The fields of a pod the runner acts on."""

    namespace: str
    name: str
    uid: str
    service: str
    accelerator_class: str
    role: str
    external: bool  # labelled gpuserve.io/readiness=external (KWOK leaves readiness to us)
    node: str | None
    phase: str
    pod_ip: str | None
    ready: bool  # the Ready condition as the API server has it
    deleting: bool
    config_map: str | None  # name of the ConfigMap behind the model-config volume
    config_key: str  # key of config.pbtxt inside that ConfigMap
    model_name: str | None
    model_version: str  # version directory name ("1" unless the pod mounts another)
    args: tuple[str, ...]  # the Triton container's args (tritonserver flags)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def serving(self) -> bool:
        return self.role == ROLE_SERVING

    def runnable(self) -> bool:
        """Bound, Running, left to an external prober and not being deleted: a kubelet would
        now start its container."""
        return (
            self.external
            and bool(self.node)
            and self.phase == "Running"
            and bool(self.pod_ip)
            and not self.deleting
            and self.config_map is not None
            and self.model_name is not None
        )


def _container(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    containers: Sequence[Mapping[str, Any]] = spec.get("containers") or []
    for container in containers:
        if container.get("name") == TRITON_CONTAINER:
            return container
    return containers[0] if containers else {}


def _config_source(spec: Mapping[str, Any]) -> tuple[str | None, str]:
    """(ConfigMap name, key) of the model-config volume."""
    for volume in spec.get("volumes") or []:
        if volume.get("name") == CONFIG_VOLUME and volume.get("configMap"):
            name = volume["configMap"].get("name")
            key = "config.pbtxt"
            for item in volume["configMap"].get("items") or []:
                if item.get("path") == "config.pbtxt":
                    key = str(item.get("key", key))
            return (str(name) if name else None, key)
    return (None, "config.pbtxt")


def _model_from_mounts(container: Mapping[str, Any]) -> tuple[str | None, str, str | None]:
    """(model name, version dir, ConfigMap key) from the container's mounts:
    ``/models/<model>/config.pbtxt`` (subPath = key) and ``/models/<model>/<version>``."""
    model: str | None = None
    version = "1"
    key: str | None = None
    for mount in container.get("volumeMounts") or []:
        parts = [p for p in str(mount.get("mountPath", "")).split("/") if p]
        if mount.get("name") == CONFIG_VOLUME and len(parts) >= 2:
            model = parts[-2]
            key = mount.get("subPath") or None
        elif mount.get("name") == MODEL_FILES_VOLUME and len(parts) >= 2:
            version = parts[-1]
    return model, version, key


def _load_model_arg(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith("--load-model="):
            return arg.split("=", 1)[1]
        if arg == "--load-model" and i + 1 < len(args):
            return args[i + 1]
    return None


def _ready(status: Mapping[str, Any]) -> bool:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def parse_pod(obj: Mapping[str, Any]) -> PodView:
    """A PodView from a pod as JSON (API field names, e.g. ``sanitize_for_serialization``)."""
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    spec: Mapping[str, Any] = obj.get("spec") or {}
    status: Mapping[str, Any] = obj.get("status") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    container = _container(spec)
    args = tuple(str(a) for a in (container.get("args") or container.get("command") or []))
    config_map, key = _config_source(spec)
    mounted_model, version, sub_key = _model_from_mounts(container)
    return PodView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        service=str(labels.get(LABEL_SERVICE, "")),
        accelerator_class=str(labels.get(LABEL_CLASS, "")),
        role=str(labels.get(LABEL_ROLE, "")),
        external=labels.get(READINESS_LABEL) == EXTERNAL,
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase", "")),
        pod_ip=status.get("podIP") or None,
        ready=_ready(status),
        deleting=meta.get("deletionTimestamp") is not None,
        config_map=config_map,
        config_key=sub_key or key,
        model_name=_load_model_arg(args) or mounted_model,
        model_version=version,
        args=args,
    )
