"""Where the model files come from inside a Triton pod.

The model repository is /models/<model>/: config.pbtxt from the ConfigMap, and the
version directory either mounted from a PVC or filled by an init container that copies
from object storage. Credentials reach the fetcher as environment from a Secret
reference; gpuserve never reads or copies the Secret's data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuserve.api.models import InferenceServiceSpec
from gpuserve.resources.naming import config_map_name
from gpuserve.triton.serverargs import MODEL_REPOSITORY

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


def model_volumes(spec: InferenceServiceSpec, service_name: str) -> ModelVolumes:
    model_dir = f"{MODEL_REPOSITORY}/{spec.model.name}"
    version_path = f"{model_dir}/{version_dir(spec)}"
    config_volume: Obj = {
        "name": "model-config",
        "configMap": {"name": config_map_name(service_name)},
    }
    tmp: Obj = {"name": "tmp", "emptyDir": {}}
    mounts: list[Obj] = [
        {
            "name": "model-config",
            "mountPath": f"{model_dir}/config.pbtxt",
            "subPath": "config.pbtxt",
        },
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    scheme, rest = _split_uri(spec.model.storage_uri)
    if scheme == "pvc":
        claim, _, sub_path = rest.partition("/")
        volumes = [
            config_volume,
            tmp,
            {
                "name": "model-files",
                "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
            },
        ]
        mounts.append(
            {
                "name": "model-files",
                "mountPath": version_path,
                "subPath": sub_path,
                "readOnly": True,
            }
        )
        return ModelVolumes(volumes=volumes, mounts=mounts)
    volumes = [config_volume, tmp, {"name": "model-files", "emptyDir": {}}]
    mounts.append({"name": "model-files", "mountPath": version_path, "readOnly": True})
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
