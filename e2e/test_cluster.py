"""Behaviour of the local control plane with simulated GPU node pools (issue 2).

The scheduling, controller and RBAC tests run on any cluster (GPUSERVE_E2E_KUBECONFIG);
the harness tests (idempotent up, down, stale state, port conflicts, KWOK readiness hook)
need the local harness.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes import config as kubeconfig_loader
from kubernetes.client.exceptions import ApiException

from e2e.cluster import (
    binaries,
    components,
    lifecycle,
    nodepools,
    ports,
    procs,
    readiness,
    reaping,
    settings,
)
from e2e.cluster.progress import Progress
from e2e.cluster.testkit import ClusterHandle, wait_for

H100 = "NVIDIA-H100-80GB-HBM3"
MIG_3G = "nvidia.com/mig-3g.40gb"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
WAIT_S = 60.0
PRIVATE_PORT_OFFSET = 1000  # the lifecycle tests' own cluster runs beside the shared one


# ---------------------------------------------------------------- helpers


def pod_manifest(name: str, *, limits: dict[str, str] | None = None,
                 product: str | None = None, tolerate_gpu: bool = True,
                 labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": PAUSE_IMAGE,
                        "resources": {"limits": limits or {}}}],
        "terminationGracePeriodSeconds": 0,
    }
    if tolerate_gpu:
        spec["tolerations"] = [GPU_TOLERATION]
    if product:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": [product]}]}]}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {"app": name}}, "spec": spec}


def is_ready(pod: client.V1Pod) -> bool:
    conditions = pod.status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def running_and_ready(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase == "Running" and is_ready(pod) else None

    return wait_for(probe, WAIT_S, f"pod {namespace}/{name} Running and Ready")


def events_for(core: client.CoreV1Api, namespace: str, name: str,
               reason: str) -> list[client.CoreV1Event]:
    events = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason={reason}").items
    return list(events)


def nodes_by_label(core: client.CoreV1Api, label: str, value: str) -> set[str]:
    return {n.metadata.name for n in core.list_node(label_selector=f"{label}={value}").items}


def expected_products() -> Counter[str]:
    """gpu.product value per simulated node as nodepools.yaml describes it ('' = CPU-only)."""
    pools = nodepools.load(settings.nodepools_path())
    counts: Counter[str] = Counter()
    for manifest in nodepools.node_manifests(pools):
        counts[manifest["metadata"]["labels"].get("nvidia.com/gpu.product", "")] += 1
    return counts


@pytest.fixture(scope="module")
def core(cluster: ClusterHandle) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api_client())


@pytest.fixture(scope="module")
def apps(cluster: ClusterHandle) -> client.AppsV1Api:
    return client.AppsV1Api(cluster.api_client())


def local_only(cluster: ClusterHandle) -> None:
    if not cluster.local:
        pytest.skip("needs the local harness (not GPUSERVE_E2E_KUBECONFIG)")


# ---------------------------------------------------------------- node pools (no cluster)


def test_nodepools_file_renders_gfd_labels_and_device_plugin_capacity() -> None:
    pools = nodepools.load(settings.nodepools_path())
    nodes = {m["metadata"]["name"]: m for m in nodepools.node_manifests(pools)}
    h100 = nodes["h100-0"]
    assert h100["metadata"]["labels"]["nvidia.com/gpu.family"] == "hopper"
    assert h100["metadata"]["labels"]["nvidia.com/gpu.compute.major"] == "9"
    assert h100["metadata"]["labels"]["nvidia.com/gpu.memory"] == "81559"
    assert h100["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert h100["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    mig = nodes["a100-mig-3g-0"]
    assert mig["metadata"]["labels"]["nvidia.com/mig.strategy"] == "mixed"
    assert mig["metadata"]["labels"]["nvidia.com/mig-3g.40gb.count"] == "2"
    assert mig["metadata"]["labels"]["nvidia.com/mig-3g.40gb.product"] == \
        "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    assert mig["status"]["capacity"][MIG_3G] == "2"
    assert "nvidia.com/gpu" not in mig["status"]["capacity"]  # mixed: all GPUs partitioned
    assert "spec" not in nodes["cpu-0"] or not nodes["cpu-0"]["spec"].get("taints")
    assert not any(k.startswith("nvidia.com/") for k in nodes["cpu-0"]["metadata"]["labels"])


def test_nodepools_errors_name_the_offending_field() -> None:
    bad = {"pools": [{"name": "ok", "count": 1},
                     {"name": "Bad_Name", "count": 1,
                      "gpu": {"product": "X", "count": 1, "memoryMiB": 1, "family": "f",
                              "compute": {"major": 8, "minor": 0}, "migCapable": True,
                              "mig": {"strategy": "mixed", "config": "c",
                                      "devices": [{"profile": "3g.40gb", "count": 3,
                                                   "memoryMiB": 1, "multiprocessors": 1}]}}}]}
    with pytest.raises(nodepools.NodePoolError) as raised:
        nodepools.parse(bad, "test.yaml")
    message = str(raised.value)
    assert "pools[1].name" in message
    assert "9 compute slices" in message  # 3 x 3g needs 9 of the GPU's 7
    with pytest.raises(nodepools.NodePoolError, match="pool names must be unique"):
        nodepools.parse({"pools": [{"name": "a", "count": 1}, {"name": "a", "count": 2}]})
    with pytest.raises(nodepools.NodePoolError, match=r"pools\[0\]\.colour"):
        nodepools.parse({"pools": [{"name": "a", "count": 1, "colour": "red"}]})


# ---------------------------------------------------------------- scheduling


@pytest.mark.cluster
def test_kubectl_lists_the_simulated_pools(cluster: ClusterHandle, core: client.CoreV1Api) -> None:
    out = cluster.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product").stdout.splitlines()
    column = out[0].index("GPU.PRODUCT")
    seen = Counter(line[column:].strip() for line in out[1:])
    expected = expected_products()
    for product, count in expected.items():
        if product:
            assert seen[product] == count, f"{product}: {seen[product]} nodes, want {count}"
    if cluster.local:
        assert seen == expected
    # Every GPU node carries the device plugin's taint and advertises its GPUs.
    for node in core.list_node(label_selector="nvidia.com/gpu.present=true").items:
        assert any(t.key == "nvidia.com/gpu" and t.effect == "NoSchedule"
                   for t in node.spec.taints or []), node.metadata.name
        gpu_resources = [k for k in node.status.allocatable if k.startswith("nvidia.com/")]
        assert gpu_resources, f"{node.metadata.name} advertises no nvidia.com resource"


@pytest.mark.cluster
def test_gpu_pod_with_h100_affinity_runs_on_an_h100_node(core: client.CoreV1Api,
                                                         namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod_manifest("h100", limits={"nvidia.com/gpu": "1"},
                                                       product=H100))
    pod = running_and_ready(core, namespace, "h100")
    assert pod.spec.node_name in nodes_by_label(core, "nvidia.com/gpu.product", H100)
    scheduled = wait_for(lambda: events_for(core, namespace, "h100", "Scheduled"), WAIT_S,
                         "the Scheduled event")
    assert any("default-scheduler" in (e.reporting_component or e.source.component or "")
               for e in scheduled)


@pytest.mark.cluster
def test_mig_slice_pods_fill_the_one_node_that_has_the_slice(core: client.CoreV1Api,
                                                             namespace: str) -> None:
    holders = [n for n in core.list_node().items
               if int(n.status.allocatable.get(MIG_3G, "0")) > 0]
    assert len(holders) == 1, f"nodes with {MIG_3G}: {[n.metadata.name for n in holders]}"
    holder, slots = holders[0].metadata.name, int(holders[0].status.allocatable[MIG_3G])
    names = [f"mig-{i}" for i in range(slots + 1)]
    for name in names:
        core.create_namespaced_pod(namespace, pod_manifest(name, limits={MIG_3G: "1"}))
    for name in names[:slots]:
        assert running_and_ready(core, namespace, name).spec.node_name == holder
    # One slice too many: the real scheduler accounts for the extended resource.
    failed = wait_for(lambda: events_for(core, namespace, names[-1], "FailedScheduling"),
                      WAIT_S, "FailedScheduling for the pod beyond the node's slices")
    assert any(f"Insufficient {MIG_3G}" in (e.message or "") for e in failed)
    assert core.read_namespaced_pod(names[-1], namespace).spec.node_name is None


@pytest.mark.cluster
@pytest.mark.parametrize(("case", "manifest", "reason_text"), [
    ("unknown-product",
     pod_manifest("gpu", limits={"nvidia.com/gpu": "1"}, product="NVIDIA-B200"),
     "node affinity"),
    ("no-toleration",
     pod_manifest("gpu", limits={"nvidia.com/gpu": "1"}, tolerate_gpu=False),
     "untolerated taint"),
])
def test_unsatisfiable_gpu_pod_stays_pending(core: client.CoreV1Api, namespace: str, case: str,
                                             manifest: dict[str, Any], reason_text: str) -> None:
    core.create_namespaced_pod(namespace, manifest)
    failed = wait_for(lambda: events_for(core, namespace, "gpu", "FailedScheduling"), WAIT_S,
                      f"FailedScheduling ({case})")
    assert any(reason_text in (e.message or "") for e in failed), [e.message for e in failed]
    pod = core.read_namespaced_pod("gpu", namespace)
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None


# ---------------------------------------------------------------- controllers and RBAC


@pytest.mark.cluster
def test_deployment_scaling_is_carried_out_by_the_controller_manager(
        cluster: ClusterHandle, core: client.CoreV1Api, apps: client.AppsV1Api,
        namespace: str) -> None:
    template = pod_manifest("web", tolerate_gpu=False)
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": template["spec"]}},
    }
    apps.create_namespaced_deployment(namespace, deployment)

    def ready_pods(want: int) -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
        ready = [p for p in pods if p.status.phase == "Running" and is_ready(p)]
        status = apps.read_namespaced_deployment_status("web", namespace).status
        if len(pods) == want and len(ready) == want and (status.ready_replicas or 0) == want:
            return pods or [client.V1Pod()]
        return None

    for replicas in (1, 5):
        if replicas != 1:
            cluster.kubectl("scale", "deployment/web", f"--replicas={replicas}", "-n", namespace)
        pods = wait_for(lambda r=replicas: ready_pods(r), WAIT_S, f"{replicas} ready replicas")
    owners = {ref.kind for p in pods for ref in p.metadata.owner_references or []}
    assert owners == {"ReplicaSet"}
    replica_sets = apps.list_namespaced_replica_set(namespace).items
    assert [ref.kind for rs in replica_sets for ref in rs.metadata.owner_references] == \
        ["Deployment"]

    cluster.kubectl("scale", "deployment/web", "--replicas=0", "-n", namespace)

    def scaled_to_zero() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
        status = apps.read_namespaced_deployment_status("web", namespace).status
        return not pods and not status.replicas

    wait_for(scaled_to_zero, WAIT_S, "all web pods deleted and the status at 0 replicas")


def token_client(cluster: ClusterHandle, token: str) -> client.CoreV1Api:
    """A client that authenticates with only the bearer token (no admin certificate)."""
    configuration = client.Configuration()
    kubeconfig_loader.load_kube_config(config_file=str(cluster.kubeconfig),
                                       client_configuration=configuration)
    configuration.cert_file = None
    configuration.key_file = None
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.CoreV1Api(client.ApiClient(configuration))


@pytest.mark.cluster
def test_rbac_forbids_a_service_account_without_rights(cluster: ClusterHandle,
                                                        core: client.CoreV1Api,
                                                        namespace: str) -> None:
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))
    token = core.create_namespaced_service_account_token("nobody", namespace, request)
    as_nobody = token_client(cluster, token.status.token)

    with pytest.raises(ApiException) as denied:
        as_nobody.list_namespaced_pod(namespace)
    assert denied.value.status == 403  # authenticated (not 401) but not authorised
    assert f"system:serviceaccount:{namespace}:nobody" in denied.value.body

    # Control: the same token works once RBAC grants the verb, so RBAC made the decision.
    rbac = client.RbacAuthorizationV1Api(cluster.api_client())
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "nobody-reads-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": namespace}]})

    def allowed() -> bool:
        try:
            as_nobody.list_namespaced_pod(namespace)
        except ApiException as exc:
            assert exc.status == 403
            return False
        return True

    wait_for(allowed, WAIT_S, "the RoleBinding to take effect")
    with pytest.raises(ApiException) as still_denied:
        as_nobody.list_namespaced_secret(namespace)
    assert still_denied.value.status == 403


# ---------------------------------------------------------------- the harness itself


@pytest.mark.cluster
def test_readiness_hook_leaves_labelled_pods_to_an_external_prober(
        cluster: ClusterHandle, core: client.CoreV1Api, namespace: str) -> None:
    local_only(cluster)
    labels = {"app": "triton", readiness.READINESS_LABEL: readiness.EXTERNAL}
    core.create_namespaced_pod(namespace, pod_manifest("triton", tolerate_gpu=False,
                                                       labels=labels))
    pod = wait_for(lambda: (p := core.read_namespaced_pod("triton", namespace))
                   .status.phase == "Running" and p, WAIT_S, "the pod to start")
    assert pod.status.pod_ip
    assert not is_ready(pod)

    readiness.set_pod_ready(cluster.api_client(), namespace, "triton", True, "TritonReady")
    pod = wait_for(lambda: (p := core.read_namespaced_pod("triton", namespace)) and is_ready(p)
                   and p, WAIT_S, "Ready after the external patch")
    assert all(s.ready for s in pod.status.container_statuses)

    readiness.set_pod_ready(cluster.api_client(), namespace, "triton", False, "TritonNotReady")
    pod = core.read_namespaced_pod("triton", namespace)
    assert not is_ready(pod)
    assert pod.status.phase == "Running"  # KWOK did not step in again


def run_cli(command: str, env: dict[str, str] | None = None,
            timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "e2e.cluster", command],
                          cwd=settings.REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env or dict(os.environ))


@pytest.mark.cluster
def test_up_twice_is_idempotent(cluster: ClusterHandle) -> None:
    local_only(cluster)
    state = settings.layout()
    before = {name: r.pid for name, r in lifecycle.read_records(state).items()}
    result = run_cli("up")
    assert result.returncode == 0, result.stderr
    assert "already up" in result.stdout
    after = lifecycle.read_records(state)
    assert {name: r.pid for name, r in after.items()} == before
    assert all(procs.is_ours(r) for r in after.values())


@pytest.fixture
def private_env(tmp_path: Path, cluster: ClusterHandle) -> Iterator[dict[str, str]]:
    """Environment for a second, throwaway cluster (own state dir and ports)."""
    local_only(cluster)
    if binaries.missing_runtime():
        pytest.skip("binaries not built")
    reaping.become_subreaper()
    env = dict(os.environ, GPUSERVE_CLUSTER_DIR=str(tmp_path / "cluster"),
               GPUSERVE_PORT_OFFSET=str(PRIVATE_PORT_OFFSET))
    yield env
    # Whatever happened in the test, leave no process behind.
    state = settings.StateLayout(tmp_path / "cluster")
    pids = [r.pid for r in lifecycle.read_records(state).values()]
    run_cli("down", env)
    reaping.reap(pids)


@pytest.mark.cluster
def test_up_refuses_a_taken_port_and_names_its_holder(private_env: dict[str, str]) -> None:
    port = settings.Ports().shifted(PRIVATE_PORT_OFFSET).apiserver
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = run_cli("up", private_env)
    assert result.returncode == 1
    assert f"port {port}" in result.stderr
    assert f"pid {os.getpid()}" in result.stderr
    state = settings.StateLayout(Path(private_env["GPUSERVE_CLUSTER_DIR"]))
    assert lifecycle.read_records(state) == {}  # nothing was started


@pytest.mark.cluster
def test_a_component_that_fails_to_start_is_reported_and_everything_is_stopped(
        private_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for key in ("GPUSERVE_CLUSTER_DIR", "GPUSERVE_PORT_OFFSET"):
        monkeypatch.setenv(key, private_env[key])
    real_apiserver = components.apiserver

    def broken_apiserver(*args: Any) -> components.Daemon:
        daemon = real_apiserver(*args)
        return components.Daemon(daemon.name, [*daemon.argv, "--no-such-flag"], daemon.port,
                                 daemon.health_url, daemon.health_tls)

    monkeypatch.setattr(components, "apiserver", broken_apiserver)
    assert lifecycle.up(Progress(), timeout=30.0) == 1
    err = capsys.readouterr().err
    state = settings.layout()
    assert "kube-apiserver exited with code" in err
    assert str(state.log_of("kube-apiserver")) in err
    assert "unknown flag: --no-such-flag" in err  # the log's tail is shown
    assert lifecycle.read_records(state) == {}
    for port in settings.ports().as_dict().values():
        assert ports.is_free(port)


@pytest.mark.cluster
def test_stale_state_is_harmless_and_down_leaves_no_process(private_env: dict[str, str]) -> None:
    state = settings.StateLayout(Path(private_env["GPUSERVE_CLUSTER_DIR"]))
    # Leftovers of a crashed run: junk etcd data, a record of a dead PID, and a record whose
    # PID now belongs to an unrelated process (this test) - which must not be signalled.
    (state.etcd_data / "member").mkdir(parents=True)
    (state.etcd_data / "member" / "junk").write_text("not an etcd database")
    dead = subprocess.Popen(["true"])
    dead.wait()
    state.run.mkdir(parents=True)
    stale = {"etcd": os.getpid(), "kube-apiserver": dead.pid}
    for name, pid in stale.items():
        (state.run / f"{name}.json").write_text(procs.ProcessRecord(
            name=name, pid=pid, exe=f"/nonexistent/{name}", start_ticks=1, port=1,
            log="/dev/null").to_json())

    up = run_cli("up", private_env)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "stale PID records" in up.stdout
    assert not (state.etcd_data / "member" / "junk").exists()
    status = run_cli("status", private_env)
    assert status.returncode == 0, status.stdout
    expected_nodes = sum(expected_products().values())
    assert f"{expected_nodes}/{expected_nodes} simulated nodes Ready" in status.stdout

    records = lifecycle.read_records(state)
    assert sorted(records) == sorted(components.START_ORDER)
    for name, record in records.items():
        assert procs.is_ours(record)
        assert Path(procs.argv0(record.pid) or "").name == name
    port_map = lifecycle.recorded_ports(state)

    down = run_cli("down", private_env)
    assert down.returncode == 0, down.stderr
    reaping.reap([r.pid for r in records.values()])
    for name, record in records.items():
        assert not procs.is_ours(record), f"{name} (pid {record.pid}) survived down"
        assert not procs.is_alive(record.pid) or procs.start_ticks(record.pid) != \
            record.start_ticks
    for port in port_map.as_dict().values():
        assert ports.is_free(port), f"port {port} still taken after down"
    assert not state.etcd_data.exists()
    assert not list(state.run.glob("*.pid"))
    again = run_cli("down", private_env)
    assert again.returncode == 0 and "not running" in again.stdout
