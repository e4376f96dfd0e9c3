"""Typed loader for e2e/nodepools.yaml and its rendering into KWOK Node manifests.

The labels follow NVIDIA GPU Feature Discovery (gpu.product, gpu.count, gpu.memory in MiB,
gpu.family, compute capability, CUDA driver/runtime versions, MIG labels) plus the GPU
Operator's gpu.present and mig.config; capacity follows the device plugin (nvidia.com/gpu,
or one nvidia.com/mig-<profile> resource per MIG profile under the mixed strategy).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MIG_PROFILE = re.compile(r"^(?P<gi>[1-7])g\.(?P<mem>[0-9]+)gb$")
MIG_COMPUTE_SLICES_PER_GPU = 7
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
POOL_LABEL = "gpuserve.io/pool"
GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}

Quantity = Annotated[str, Field(pattern=QUANTITY)]
Version = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+){1,2}$")]


class NodePoolError(ValueError):
    pass


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              frozen=True)


class Compute(_Model):
    major: int = Field(ge=1, le=20)
    minor: int = Field(ge=0, le=20)


class MigDevice(_Model):
    profile: str
    count: int = Field(ge=1, le=56)
    memory_mi_b: int = Field(gt=0, alias="memoryMiB")
    multiprocessors: int = Field(gt=0)

    @field_validator("profile")
    @classmethod
    def _profile_shape(cls, value: str) -> str:
        if not MIG_PROFILE.match(value):
            raise ValueError(f"MIG profile must look like 1g.10gb or 3g.40gb, got {value!r}")
        return value

    @property
    def compute_slices(self) -> int:
        match = MIG_PROFILE.match(self.profile)
        assert match is not None  # checked by the validator
        return int(match["gi"])


class Mig(_Model):
    strategy: Literal["mixed", "single"]
    config: str = Field(min_length=1, description="GPU Operator mig-parted layout name")
    devices: list[MigDevice] = Field(min_length=1)

    @model_validator(mode="after")
    def _single_means_one_profile(self) -> Mig:
        profiles = [d.profile for d in self.devices]
        if len(set(profiles)) != len(profiles):
            raise ValueError(f"each MIG profile may be listed once, got {profiles}")
        if self.strategy == "single" and len(profiles) != 1:
            raise ValueError("strategy 'single' needs exactly one MIG profile on the node")
        return self


class Gpu(_Model):
    product: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    count: int = Field(ge=1, le=16)
    memory_mi_b: int = Field(gt=0, alias="memoryMiB")
    family: str = Field(pattern=DNS_LABEL)
    compute: Compute
    mig_capable: bool = False
    mig: Mig | None = None

    @model_validator(mode="after")
    def _mig_fits(self) -> Gpu:
        if self.mig is None:
            return self
        if not self.mig_capable:
            raise ValueError("mig is set but migCapable is false")
        used = sum(d.compute_slices * d.count for d in self.mig.devices)
        limit = MIG_COMPUTE_SLICES_PER_GPU * self.count
        if used > limit:
            raise ValueError(f"MIG devices use {used} compute slices but {self.count} GPU(s) "
                             f"have {limit}")
        return self


class Defaults(_Model):
    cpu: Quantity = "64"
    memory: Quantity = "512Gi"
    pods: int = Field(default=110, ge=1, le=5000)
    ephemeral_storage: Quantity = "1Ti"
    zone: str = Field(default="local-a", pattern=DNS_LABEL)
    driver: Version = "550.90.07"
    cuda_runtime: Version = "12.4"


class Taint(_Model):
    key: str = Field(min_length=1)
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Pool(_Model):
    name: str = Field(pattern=DNS_LABEL, max_length=50)
    count: int = Field(ge=0, le=500)
    instance_type: str = Field(default="local", min_length=1)
    cpu: Quantity | None = None
    memory: Quantity | None = None
    pods: int | None = Field(default=None, ge=1, le=5000)
    ephemeral_storage: Quantity | None = None
    zone: str | None = Field(default=None, pattern=DNS_LABEL)
    driver: Version | None = None
    cuda_runtime: Version | None = None
    gpu: Gpu | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    # None: GPU pools get the nvidia.com/gpu NoSchedule taint; [] means no taint at all.
    taints: list[Taint] | None = None


class NodePools(_Model):
    defaults: Defaults = Field(default_factory=Defaults)
    pools: list[Pool] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> NodePools:
        names = [p.name for p in self.pools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"pool names must be unique, repeated: {duplicates}")
        return self

    def node_count(self) -> int:
        return sum(p.count for p in self.pools)


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def parse(data: Any, source: str = "<node pools>") -> NodePools:
    try:
        return NodePools.model_validate(data)
    except ValidationError as exc:
        lines = [f"  {_location(err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise NodePoolError(f"{source} is invalid:\n" + "\n".join(lines)) from None


def load(path: Path) -> NodePools:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise NodePoolError(f"cannot read node pools file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise NodePoolError(f"{path} is not valid YAML: {exc}") from None
    return parse(data, str(path))


def _version_labels(prefix: str, version: str, parts: tuple[str, ...]) -> dict[str, str]:
    labels = {f"{prefix}.full": version}
    for name, value in zip(parts, version.split("."), strict=False):
        labels[f"{prefix}.{name}"] = value
    return labels


def _gpu_labels(pool: Pool, gpu: Gpu, defaults: Defaults) -> dict[str, str]:
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": gpu.product,
        "nvidia.com/gpu.count": str(gpu.count),
        "nvidia.com/gpu.memory": str(gpu.memory_mi_b),
        "nvidia.com/gpu.family": gpu.family,
        "nvidia.com/gpu.compute.major": str(gpu.compute.major),
        "nvidia.com/gpu.compute.minor": str(gpu.compute.minor),
        "nvidia.com/gpu.machine": pool.instance_type,
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": str(gpu.mig_capable).lower(),
        "nvidia.com/mps.capable": "false",
    }
    labels |= _version_labels("nvidia.com/cuda.driver-version", pool.driver or defaults.driver,
                              ("major", "minor", "revision"))
    labels |= _version_labels("nvidia.com/cuda.runtime-version",
                              pool.cuda_runtime or defaults.cuda_runtime, ("major", "minor"))
    if gpu.mig_capable and gpu.mig is None:
        labels["nvidia.com/mig.config"] = "all-disabled"  # the GPU Operator's default layout
    if gpu.mig is not None:
        labels["nvidia.com/mig.strategy"] = gpu.mig.strategy
        labels["nvidia.com/mig.config"] = gpu.mig.config
        labels["nvidia.com/mig.config.state"] = "success"
        if gpu.mig.strategy == "single":
            # GFD relabels the whole node as the MIG device type under "single".
            device = gpu.mig.devices[0]
            labels["nvidia.com/gpu.product"] = f"{gpu.product}-MIG-{device.profile}"
            labels["nvidia.com/gpu.count"] = str(device.count)
            labels["nvidia.com/gpu.memory"] = str(device.memory_mi_b)
        else:
            for device in gpu.mig.devices:
                prefix = f"nvidia.com/mig-{device.profile}"
                labels |= {
                    f"{prefix}.count": str(device.count),
                    f"{prefix}.memory": str(device.memory_mi_b),
                    f"{prefix}.product": f"{gpu.product}-MIG-{device.profile}",
                    f"{prefix}.multiprocessors": str(device.multiprocessors),
                    f"{prefix}.slices.gi": str(device.compute_slices),
                    f"{prefix}.slices.ci": str(device.compute_slices),
                    f"{prefix}.replicas": "1",
                    f"{prefix}.sharing-strategy": "none",
                }
    return labels


def _gpu_resources(gpu: Gpu) -> dict[str, str]:
    if gpu.mig is None:
        return {"nvidia.com/gpu": str(gpu.count)}
    if gpu.mig.strategy == "single":
        return {"nvidia.com/gpu": str(gpu.mig.devices[0].count)}
    # Mixed: every GPU on the node is partitioned, so no whole nvidia.com/gpu is advertised.
    return {f"nvidia.com/mig-{d.profile}": str(d.count) for d in gpu.mig.devices}


def node_address(ordinal: int) -> str:
    """A distinct InternalIP per fake node (10.240.0.0/16), so pods' hostIPs differ."""
    return f"10.240.{ordinal // 250}.{ordinal % 250 + 1}"


def node_manifest(pool: Pool, index: int, defaults: Defaults,
                  ordinal: int = 0) -> dict[str, Any]:
    name = f"{pool.name}-{index}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": pool.instance_type,
        "topology.kubernetes.io/zone": pool.zone or defaults.zone,
        POOL_LABEL: pool.name,
        "type": "kwok",
    }
    capacity = {
        "cpu": pool.cpu or defaults.cpu,
        "memory": pool.memory or defaults.memory,
        "pods": str(pool.pods or defaults.pods),
        "ephemeral-storage": pool.ephemeral_storage or defaults.ephemeral_storage,
    }
    taints: list[dict[str, str]] = []
    if pool.gpu is not None:
        labels |= _gpu_labels(pool, pool.gpu, defaults)
        capacity |= _gpu_resources(pool.gpu)
        taints = [dict(GPU_TAINT)]
    if pool.taints is not None:
        taints = [t.model_dump(exclude_none=True) for t in pool.taints]
    labels |= pool.labels
    spec: dict[str, Any] = {"taints": taints} if taints else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            # KWOK only manages nodes carrying this annotation (see --manage-nodes-with-...).
            "annotations": {KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1],
                            "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": spec,
        # Kept by the API server on create and by KWOK's node-initialize stage.
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "addresses": [{"type": "InternalIP", "address": node_address(ordinal)},
                          {"type": "Hostname", "address": name}],
        },
    }


def node_manifests(pools: NodePools) -> list[dict[str, Any]]:
    pairs = [(pool, i) for pool in pools.pools for i in range(pool.count)]
    manifests = [node_manifest(pool, i, pools.defaults, ordinal)
                 for ordinal, (pool, i) in enumerate(pairs)]
    names = [m["metadata"]["name"] for m in manifests]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise NodePoolError(f"node names collide: {clashes}; rename a pool")
    return manifests


def summary(pools: NodePools) -> str:
    parts = []
    for pool in pools.pools:
        what = "cpu-only"
        if pool.gpu is not None:
            what = f"{pool.gpu.product} x{pool.gpu.count}"
            if pool.gpu.mig is not None:
                slices = ",".join(f"{d.profile} x{d.count}" for d in pool.gpu.mig.devices)
                what += f" MIG {pool.gpu.mig.strategy} [{slices}]"
        parts.append(f"{pool.name} x{pool.count} ({what})")
    return "; ".join(parts)
