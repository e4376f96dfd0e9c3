"""Command lines and health endpoints of the five daemons, in start order."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from e2e.cluster import binaries, settings
from e2e.cluster.pki import FRONT_PROXY_CLIENT, Pki
from e2e.cluster.settings import Ports, StateLayout

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
KWOK = "kwok"
START_ORDER = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER, KWOK)

# The controllers this harness needs (issue 2), plus three that keep the cluster coherent:
# root-ca publisher (kube-root-ca.crt in every namespace), pod GC (pods of deleted nodes),
# clusterrole aggregation (fills the admin/edit/view roles that RoleBindings refer to).
CONTROLLERS = (
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "horizontal-pod-autoscaler-controller",
    "disruption-controller",
    "namespace-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "root-ca-certificate-publisher-controller",
    "pod-garbage-collector-controller",
    "clusterrole-aggregation-controller",
)
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class Daemon:
    name: str
    argv: list[str]
    port: int
    health_url: str
    # None: the admin client certificate is needed (API server); "insecure": self-signed.
    health_tls: str
    env: dict[str, str] | None = field(default=None)


def _controlplane(name: str) -> str:
    # Invoked through the symlink so argv[0] (and ps, and /proc/<pid>/comm) name the component.
    return str(binaries.CONTROLPLANE.path(name))


def etcd(state: StateLayout, ports: Ports) -> Daemon:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    argv = [
        _controlplane(ETCD),
        f"--name={settings.CLUSTER_NAME}",
        f"--data-dir={state.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={settings.CLUSTER_NAME}={peer}",
        "--initial-cluster-state=new",
        # A throwaway test store: skipping fsync makes writes (and start-up) much faster.
        "--unsafe-no-fsync=true",
        "--quota-backend-bytes=2147483648",
        "--log-level=warn",
    ]
    return Daemon(ETCD, argv, ports.etcd_client, f"{client}/health", "none")


def apiserver(state: StateLayout, ports: Ports, pki: Pki) -> Daemon:
    argv = [
        _controlplane(APISERVER),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        "--authorization-mode=Node,RBAC",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.sa_public_key}",
        f"--service-account-signing-key-file={pki.sa_private_key}",
        f"--service-cluster-ip-range={settings.SERVICE_CIDR}",
        # Endpoints may not hold loopback addresses, so the `kubernetes` Service endpoint
        # reconciler would fail forever against 127.0.0.1; nothing in-cluster dials it.
        "--endpoint-reconciler-type=none",
        # Adds node.kubernetes.io/not-ready to new nodes; only the node lifecycle controller
        # (not run here, KWOK nodes are Ready at once) would take it off again.
        "--disable-admission-plugins=TaintNodesByCondition",
        # Aggregation layer (for metrics-style APIs added later); routing to endpoint IPs
        # because there is no kube-proxy to make Service IPs reachable.
        f"--requestheader-client-ca-file={pki.front_proxy_ca_cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.front_proxy_client_cert}",
        f"--proxy-client-key-file={pki.front_proxy_client_key}",
        "--enable-aggregator-routing=true",
        "--allow-privileged=true",
        "--profiling=false",
        "--event-ttl=1h",
    ]
    return Daemon(APISERVER, argv, ports.apiserver,
                  f"https://127.0.0.1:{ports.apiserver}/readyz", "admin")


def _loopback_client_flags(kubeconfig: Path, port: int) -> list[str]:
    """What the controller manager and the scheduler share: one kubeconfig for the API and
    for checking their own callers, HTTPS on loopback only, one instance (no election)."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def controller_manager(state: StateLayout, ports: Ports, pki: Pki) -> Daemon:
    kubeconfig = state.kubeconfigs / "controller-manager.kubeconfig"
    argv = [
        _controlplane(CONTROLLER_MANAGER),
        *_loopback_client_flags(kubeconfig, ports.controller_manager),
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.sa_private_key}",
        f"--root-ca-file={pki.ca_cert}",
        f"--controllers={','.join(CONTROLLERS)}",
        f"--cluster-name={settings.CLUSTER_NAME}",
    ]
    return Daemon(CONTROLLER_MANAGER, argv, ports.controller_manager,
                  f"https://127.0.0.1:{ports.controller_manager}/healthz", "insecure")


def scheduler(state: StateLayout, ports: Ports) -> Daemon:
    kubeconfig = state.kubeconfigs / "scheduler.kubeconfig"
    argv = [
        _controlplane(SCHEDULER),
        *_loopback_client_flags(kubeconfig, ports.scheduler),
    ]
    return Daemon(SCHEDULER, argv, ports.scheduler,
                  f"https://127.0.0.1:{ports.scheduler}/healthz", "insecure")


def stage_files(directory: Path = settings.KWOK_STAGES_DIR) -> list[Path]:
    return sorted(directory.glob("*.yaml"))


def kwok(state: StateLayout, ports: Ports) -> Daemon:
    argv = [
        str(binaries.KWOK.path("kwok")),
        f"--kubeconfig={state.kubeconfigs / 'kwok.kubeconfig'}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        f"--cidr={settings.POD_CIDR}",  # first pod IP is the address given here
        "--node-ip=10.240.255.254",  # fallback only; nodes carry their own InternalIP
        f"--server-address=127.0.0.1:{ports.kwok}",
        "--node-lease-duration-seconds=40",
        "-v=WARN",  # INFO logs a line per node lease renewal every 10 s
    ]
    # Our stage files replace KWOK's built-in node and pod stages (see kwok_stages/).
    argv += [f"--config={path}" for path in stage_files()]
    # KWOK reads ~/.kwok/kwok.yaml unless its work dir points elsewhere.
    env = dict(os.environ, KWOK_WORKDIR=str(state.kwok_workdir))
    return Daemon(KWOK, argv, ports.kwok, f"http://127.0.0.1:{ports.kwok}/healthz", "none",
                  env=env)


def all_daemons(state: StateLayout, ports: Ports, pki: Pki) -> list[Daemon]:
    return [etcd(state, ports), apiserver(state, ports, pki),
            controller_manager(state, ports, pki), scheduler(state, ports), kwok(state, ports)]
