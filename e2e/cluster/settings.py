"""Where the harness keeps its files, which versions it pins and which ports it uses.

Everything is computed at run time from the environment and this file's location, so the
repository can live anywhere and several clusters can coexist (different state dirs and
port offsets).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]
CONTROLPLANE_MODULE = REPO_ROOT / "e2e" / "controlplane"
KWOK_STAGES_DIR = PACKAGE_DIR / "kwok_stages"
DEFAULT_NODEPOOLS = REPO_ROOT / "e2e" / "nodepools.yaml"

# Pinned versions. The control plane version must match e2e/controlplane/go.mod.
KUBERNETES_VERSION = "v1.34.4"
# v0.7.0 declares go 1.24 and uses client-go 0.33, within the supported skew of 1.34.
KWOK_VERSION = "v0.7.0"
# Last Helm 3 line built on client-go 0.34, so it shares Go build cache with the control plane.
HELM_VERSION = "v3.19.5"
# The Gateway API Inference Extension whose InferencePool CRD (inference.networking.k8s.io/v1,
# GA since v1.0) the cluster serves; its CRD YAML comes from the Go module.
INFERENCE_EXTENSION_VERSION = "v1.4.0"

CLUSTER_NAME = "gpuserve"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.1/16"  # KWOK hands out pod IPs from this address upwards


@dataclass(frozen=True)
class Ports:
    """Loopback ports of one cluster. Defaults avoid the usual 2379/6443/10257/10259."""

    etcd_client: int = 16379
    etcd_peer: int = 16380
    apiserver: int = 16443
    controller_manager: int = 16257
    scheduler: int = 16259
    kwok: int = 16247

    def shifted(self, offset: int) -> Ports:
        return Ports(**{f.name: getattr(self, f.name) + offset for f in fields(self)})

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def cache_dir() -> Path:
    """Root of everything kept outside the repository ($GPUSERVE_CACHE, ~/.cache/gpuserve)."""
    env = os.environ.get("GPUSERVE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "gpuserve"


def bin_root() -> Path:
    return cache_dir() / "bin"


def build_log_dir() -> Path:
    return cache_dir() / "build"


def state_dir() -> Path:
    """Per-cluster state: PKI, kubeconfigs, etcd data, logs, PID files."""
    env = os.environ.get("GPUSERVE_CLUSTER_DIR")
    return Path(env).expanduser() if env else cache_dir() / "cluster"


def port_offset() -> int:
    """$GPUSERVE_PORT_OFFSET shifts every port, so a second cluster can run beside the first."""
    raw = os.environ.get("GPUSERVE_PORT_OFFSET", "0").strip() or "0"
    try:
        offset = int(raw)
    except ValueError as exc:
        raise SystemExit(f"GPUSERVE_PORT_OFFSET must be an integer, got {raw!r}") from exc
    if not 0 <= offset <= 40000:
        raise SystemExit(f"GPUSERVE_PORT_OFFSET must be within 0..40000, got {offset}")
    return offset


def ports() -> Ports:
    return Ports().shifted(port_offset())


def nodepools_path() -> Path:
    env = os.environ.get("GPUSERVE_NODEPOOLS")
    return Path(env).expanduser() if env else DEFAULT_NODEPOOLS


@dataclass(frozen=True)
class StateLayout:
    """Named paths inside one cluster's state directory."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd-data"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def kwok_workdir(self) -> Path:
        return self.root / "kwok"

    @property
    def kubeconfigs(self) -> Path:
        return self.root / "kubeconfigs"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def cluster_record(self) -> Path:
        """Ports and binaries of the running cluster, so status/down use what up used."""
        return self.run / "cluster.json"

    def log_of(self, component: str) -> Path:
        return self.logs / f"{component}.log"


def layout() -> StateLayout:
    return StateLayout(state_dir())
