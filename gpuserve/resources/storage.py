"""Where the model files come from inside a Triton pod.

The model repository is /models/<model>/: config.pbtxt from the ConfigMap, and the
version directory either mounted from a PVC or filled by an init container that copies
from object storage. A vLLM model's version directory holds model.json from the
ConfigMap instead, and its weights are mounted (or copied) at /weights. Credentials reach
the fetcher as environment from a Secret reference; gpuserve never reads or copies the
Secret's data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuserve.api.models import InferenceServiceSpec
from gpuserve.resources.naming import config_map_name
from gpuserve.triton.llmconfig import MODEL_JSON, VLLM_WEIGHTS_DIR
from gpuserve.triton.serverargs import model_dir, version_path

Obj = dict[str, Any]

FETCHER_IMAGE = "docker.io/rclone/rclone:1.68"
# rclone's on-the-fly remotes: no config file, credentials from the environment.
_RCLONE_REMOTES = {
    "s3": ":s3,env_auth=true:",
    "gs": ":gcs,env_auth=true:",
    "as": ":azureblob,env_auth=true:",
}


@dataclass(frozen=True)
class ModelVolumes:
    volumes: list[Obj] = field(default_factory=list)
    mounts: list[Obj] = field(default_factory=list)
    init_containers: list[Obj] = field(default_factory=list)


def _split_uri(uri: str) -> tuple[str, str]:
    scheme, _, rest = uri.partition("://")
    return scheme, rest


def version_dir(spec: InferenceServiceSpec) -> str:
    return str(spec.model.version or 1)


def _config_files(spec: InferenceServiceSpec, service_name: str) -> tuple[Obj, Obj]:
    """The ConfigMap's volume and mount. config.pbtxt alone is mounted by subPath beside
    the version directory; with vLLM's model.json the ConfigMap is the model directory,
    its model.json projected into the version directory (the weights live elsewhere)."""
    source: Obj = {"name": config_map_name(service_name)}
    if spec.model.format != "vllm":
        mount: Obj = {
            "name": "model-config",
            "mountPath": f"{model_dir(spec)}/config.pbtxt",
            "subPath": "config.pbtxt",
        }
        return {"name": "model-config", "configMap": source}, mount
    source["items"] = [
        {"key": "config.pbtxt", "path": "config.pbtxt"},
        {"key": MODEL_JSON, "path": f"{version_dir(spec)}/{MODEL_JSON}"},
    ]
    mount = {"name": "model-config", "mountPath": model_dir(spec), "readOnly": True}
    return {"name": "model-config", "configMap": source}, mount


def model_volumes(spec: InferenceServiceSpec, service_name: str) -> ModelVolumes:
    # vLLM reads the weights from the path in model.json; every other backend from the
    # version directory.
    files_path = VLLM_WEIGHTS_DIR if spec.model.format == "vllm" else version_path(spec)
    config_volume, config_mount = _config_files(spec, service_name)
    tmp: Obj = {"name": "tmp", "emptyDir": {}}
    mounts: list[Obj] = [config_mount, {"name": "tmp", "mountPath": "/tmp"}]
    extra: list[Obj] = []
    if spec.is_llm:
        # The engines' worker processes share tensors through /dev/shm, which a container
        # otherwise gets at 64 MiB.
        extra.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    scheme, rest = _split_uri(spec.model.storage_uri)
    if scheme == "pvc":
        claim, _, sub_path = rest.partition("/")
        volumes = [
            config_volume,
            tmp,
            *extra,
            {
                "name": "model-files",
                "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
            },
        ]
        mounts.append(
            {
                "name": "model-files",
                "mountPath": files_path,
                "subPath": sub_path,
                "readOnly": True,
            }
        )
        return ModelVolumes(volumes=volumes, mounts=mounts)
    volumes = [config_volume, tmp, *extra, {"name": "model-files", "emptyDir": {}}]
    mounts.append({"name": "model-files", "mountPath": files_path, "readOnly": True})
    if scheme not in _RCLONE_REMOTES:
        # demo://: the local runner provides the catalogue model; nothing to fetch.
        return ModelVolumes(volumes=volumes, mounts=mounts)
    fetch: Obj = {
        "name": "fetch-model",
        "image": FETCHER_IMAGE,
        "args": ["copy", "--quiet", f"{_RCLONE_REMOTES[scheme]}{rest}", "/model-files"],
        "volumeMounts": [{"name": "model-files", "mountPath": "/model-files"}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "env": [{"name": "RCLONE_CONFIG", "value": "/dev/null"}],
    }
    if spec.model.storage_secret_ref is not None:
        fetch["envFrom"] = [{"secretRef": {"name": spec.model.storage_secret_ref.name}}]
    return ModelVolumes(volumes=volumes, mounts=mounts, init_containers=[fetch])
