"""up, down and status of the local cluster."""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.cluster import (
    binaries,
    components,
    extension_crds,
    kubeconfigs,
    nodepools,
    pki,
    ports,
    procs,
    settings,
)
from e2e.cluster.apiclient import ApiClient, ApiError, admin_tls, get_status, insecure_tls
from e2e.cluster.components import Daemon
from e2e.cluster.progress import Progress
from e2e.cluster.settings import Ports, StateLayout

POLL_S = 0.1
NODES_READY_TIMEOUT_S = 60.0
LOG_TAIL_LINES = 25
LOCK_TIMEOUT_S = 300.0


class StartupError(RuntimeError):
    def __init__(self, message: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class Started:
    daemon: Daemon
    proc: subprocess.Popen[bytes]
    record: procs.ProcessRecord


def _log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(f"    {line}" for line in text[-lines:])


def read_records(state: StateLayout) -> dict[str, procs.ProcessRecord]:
    found = {}
    for name in components.START_ORDER:
        record = procs.read_record(state.run, name)
        if record is not None:
            found[name] = record
    return found


def recorded_ports(state: StateLayout) -> Ports:
    """The ports the running (or last) cluster was started with."""
    try:
        data = json.loads(state.cluster_record.read_text())
        return Ports(**data["ports"])
    except (OSError, ValueError, KeyError, TypeError):
        return settings.ports()


def _apiserver_ready(state: StateLayout, apiserver_port: int) -> bool:
    try:
        tls = admin_tls(pki.Pki(state.pki))
    except OSError:
        return False
    status, _ = get_status(f"https://127.0.0.1:{apiserver_port}/readyz", tls)
    return status == 200


def is_up(state: StateLayout | None = None) -> bool:
    """Every daemon `up` recorded is still the process it started, and the API is ready."""
    state = state or settings.layout()
    records = read_records(state)
    if set(records) != set(components.START_ORDER):
        return False
    if not all(procs.is_ours(r) for r in records.values()):
        return False
    return _apiserver_ready(state, recorded_ports(state).apiserver)


def _wait_until(check: Callable[[], bool], timeout: float, started: Started | None,
                what: str) -> None:
    """Polls check() until it holds; fails early if the daemon being waited for exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if started is not None and started.proc.poll() is not None:
            raise StartupError(f"{started.daemon.name} exited with code "
                               f"{started.proc.returncode} while {what}",
                               Path(started.record.log))
        if check():
            return
        time.sleep(POLL_S)
    log = Path(started.record.log) if started else None
    raise StartupError(f"timed out after {timeout:.0f} s {what}", log)


def _health_check(daemon: Daemon, tls_admin: ssl.SSLContext) -> Callable[[], bool]:
    tls = {"admin": tls_admin, "insecure": insecure_tls(), "none": None}[daemon.health_tls]

    def check() -> bool:
        status, _ = get_status(daemon.health_url, tls)
        return status == 200

    return check


def _rotate_logs(state: StateLayout) -> None:
    """Keeps one previous log per component; each up starts with empty logs."""
    state.logs.mkdir(parents=True, exist_ok=True)
    for name in components.START_ORDER:
        log = state.log_of(name)
        if log.exists():
            log.replace(log.with_suffix(".log.prev"))


def _stop_recorded(state: StateLayout, progress: Progress) -> bool:
    """Stops every recorded daemon, newest first. Returns False if one survived SIGKILL."""
    ok = True
    for name in reversed(components.START_ORDER):
        record = procs.read_record(state.run, name)
        if record is None:
            procs.forget(state.run, name)
            continue
        try:
            outcome = procs.stop(record)
        except RuntimeError as exc:
            progress.step(f"{name} (pid {record.pid}): {exc}")
            ok = False
            continue
        progress.step(f"{name} (pid {record.pid}): {outcome}")
        procs.forget(state.run, name)
    return ok


def _wipe_runtime_state(state: StateLayout) -> None:
    # A fresh etcd every time: nothing a previous run left behind can break this one.
    if state.etcd_data.is_dir() and not state.etcd_data.is_symlink():
        shutil.rmtree(state.etcd_data)
    else:
        state.etcd_data.unlink(missing_ok=True)
    state.cluster_record.unlink(missing_ok=True)


def _write_credentials(state: StateLayout, server: str) -> pki.Pki:
    authority = pki.create(state.pki)
    kubeconfigs.write(state.admin_kubeconfig, authority, pki.ADMIN, server)
    kubeconfigs.write(state.kubeconfigs / "controller-manager.kubeconfig", authority,
                      pki.CONTROLLER_MANAGER, server)
    kubeconfigs.write(state.kubeconfigs / "scheduler.kubeconfig", authority, pki.SCHEDULER,
                      server)
    kubeconfigs.write(state.kubeconfigs / "kwok.kubeconfig", authority, pki.KWOK, server)
    return authority


def _write_cluster_record(state: StateLayout, port_map: Ports) -> None:
    state.run.mkdir(parents=True, exist_ok=True)
    record = {
        "ports": port_map.as_dict(),
        "kubeconfig": str(state.admin_kubeconfig),
        "versions": {"kubernetes": settings.KUBERNETES_VERSION, "kwok": settings.KWOK_VERSION},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    state.cluster_record.write_text(json.dumps(record, indent=2) + "\n")


def _create_nodes(api: ApiClient, manifests: list[dict[str, Any]]) -> None:
    for manifest in manifests:
        try:
            api.post("/api/v1/nodes", manifest)
        except ApiError as exc:
            name = manifest["metadata"]["name"]
            raise StartupError(f"creating node {name} failed: {exc}") from None


def _ready_node_count(api: ApiClient) -> tuple[int, int]:
    nodes = api.get("/api/v1/nodes?labelSelector=type%3Dkwok")["items"]
    ready = 0
    for node in nodes:
        conditions = node.get("status", {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            ready += 1
    return ready, len(nodes)


def _start_group(group: list[Daemon], state: StateLayout, started: list[Started]) -> None:
    for daemon in group:
        proc, record = procs.start(daemon.name, daemon.argv, state.log_of(daemon.name),
                                   daemon.port, state.run, daemon.env)
        started.append(Started(daemon, proc, record))


def _find(started: list[Started], name: str) -> Started:
    return next(s for s in started if s.daemon.name == name)


def _start_daemons(daemons: list[Daemon], state: StateLayout, api: ApiClient, timeout: float,
                   progress: Progress, started: list[Started]) -> None:
    """etcd, then the API server, then the three clients of the API together."""
    by_name = {d.name: d for d in daemons}
    groups = [[components.ETCD], [components.APISERVER],
              [components.CONTROLLER_MANAGER, components.SCHEDULER, components.KWOK]]
    for group in groups:
        first = len(started)
        _start_group([by_name[n] for n in group], state, started)
        for item in started[first:]:
            _wait_until(_health_check(item.daemon, api.tls), timeout, item,
                        f"waiting for {item.daemon.health_url}")
            progress.step(f"{item.daemon.name} ready (pid {item.record.pid}, "
                          f"port {item.daemon.port})")


def _add_nodes(api: ApiClient, pools: nodepools.NodePools, manifests: list[dict[str, Any]],
               started: list[Started], timeout: float, progress: Progress) -> None:
    """Creates the simulated nodes, waits for KWOK to make them Ready, then for the
    controller manager's first object (default/default), proof that controllers work."""
    _create_nodes(api, manifests)

    def nodes_ready() -> bool:
        ready, total = _ready_node_count(api)
        return ready == total == len(manifests)

    _wait_until(nodes_ready, min(timeout, NODES_READY_TIMEOUT_S),
                _find(started, components.KWOK),
                f"waiting for {len(manifests)} KWOK nodes to become Ready")
    progress.step(f"{len(manifests)} simulated nodes Ready: {nodepools.summary(pools)}")

    def default_service_account() -> bool:
        try:
            api.get("/api/v1/namespaces/default/serviceaccounts/default")
        except ApiError:
            return False
        return True

    _wait_until(default_service_account, timeout, _find(started, components.CONTROLLER_MANAGER),
                "waiting for the controller manager to create default/default")


def _print_usage(progress: Progress, state: StateLayout) -> None:
    progress.note(f"kubeconfig: {state.admin_kubeconfig}")
    progress.note(f"  export KUBECONFIG={state.admin_kubeconfig}")
    progress.note("  kubectl get nodes -L nvidia.com/gpu.product,nvidia.com/gpu.count")


@contextlib.contextmanager
def _exclusive(state: StateLayout, progress: Progress) -> Iterator[None]:
    """Serialises up/down on one state dir (two terminals, parallel test sessions).
    The daemons don't inherit the lock: Popen closes every other descriptor."""
    state.root.mkdir(parents=True, exist_ok=True)
    lock_path = state.root / ".lock"
    with lock_path.open("w") as handle:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        told = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StartupError(f"another up/down has held {lock_path} for "
                                       f"{LOCK_TIMEOUT_S:.0f} s") from None
                if not told:
                    progress.step(f"waiting for another up/down to finish ({lock_path})")
                    told = True
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def up(progress: Progress, timeout: float = 120.0) -> int:
    state = settings.layout()
    progress.step(f"state dir {state.root}")
    try:
        with _exclusive(state, progress):
            return _up_locked(state, progress, timeout)
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _up_locked(state: StateLayout, progress: Progress, timeout: float) -> int:
    try:
        binaries.require_runtime()
        extension_crds.require()
        pools = nodepools.load(settings.nodepools_path())
        manifests = nodepools.node_manifests(pools)
        if not components.stage_files():
            # KWOK would silently fall back to its built-in stages (no readiness hook).
            raise StartupError(f"no KWOK stage files in {settings.KWOK_STAGES_DIR}")
    except (binaries.BuildError, extension_crds.CrdError, nodepools.NodePoolError,
            StartupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    records = read_records(state)
    alive = [name for name, record in records.items() if procs.is_ours(record)]
    if len(alive) == len(components.START_ORDER) and _apiserver_ready(
            state, recorded_ports(state).apiserver):
        progress.step("cluster is already up; nothing to do")
        _print_usage(progress, state)
        return 0
    if records:
        what = (f"a partly running cluster ({', '.join(alive)})" if alive
                else "stale PID records")
        progress.step(f"found {what} from a previous run; cleaning up first")
        if not _stop_recorded(state, progress):
            print("error: could not stop the previous cluster", file=sys.stderr)
            return 1
    _wipe_runtime_state(state)

    port_map = settings.ports()
    try:
        ports.ensure_free({
            "etcd client": port_map.etcd_client, "etcd peer": port_map.etcd_peer,
            "kube-apiserver": port_map.apiserver,
            "kube-controller-manager": port_map.controller_manager,
            "kube-scheduler": port_map.scheduler, "kwok": port_map.kwok,
        })
    except ports.PortInUse as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    progress.step(f"ports free: {' '.join(str(p) for p in port_map.as_dict().values())}")

    server = f"https://127.0.0.1:{port_map.apiserver}"
    authority = _write_credentials(state, server)
    _write_cluster_record(state, port_map)
    _rotate_logs(state)
    progress.step("PKI and kubeconfigs written")

    daemons = components.all_daemons(state, port_map, authority)
    api = ApiClient(server, admin_tls(authority))
    started: list[Started] = []
    try:
        _start_daemons(daemons, state, api, timeout, progress, started)
        _add_nodes(api, pools, manifests, started, timeout, progress)
        extension_crds.install(api, progress)
    except (StartupError, extension_crds.CrdError, ApiError, OSError,
            KeyboardInterrupt) as exc:
        log = getattr(exc, "log", None)
        print(f"error: {exc or 'interrupted'}", file=sys.stderr)
        if log is not None:
            print(f"  log: {log} (last lines below)\n{_log_tail(log)}", file=sys.stderr)
        progress.step("stopping what was started")
        _stop_recorded(state, progress)
        for item in started:
            procs.reap_if_child(item.proc.pid)
        _wipe_runtime_state(state)
        return 1
    progress.step(f"cluster up in {progress.elapsed():.1f} s")
    _print_usage(progress, state)
    return 0


def down(progress: Progress) -> int:
    state = settings.layout()
    try:
        with _exclusive(state, progress):
            return _down_locked(state, progress)
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _down_locked(state: StateLayout, progress: Progress) -> int:
    records = read_records(state)
    if not records and not state.etcd_data.exists():
        progress.step(f"cluster is not running (nothing recorded in {state.run})")
        return 0
    ok = _stop_recorded(state, progress)
    _wipe_runtime_state(state)
    progress.step("cluster down" if ok else "cluster down with errors")
    return 0 if ok else 1


def status() -> int:
    """Prints each component's state; exit code 0 when everything runs, 3 otherwise."""
    state = settings.layout()
    port_map = recorded_ports(state)
    port_of = {
        components.ETCD: port_map.etcd_client, components.APISERVER: port_map.apiserver,
        components.CONTROLLER_MANAGER: port_map.controller_manager,
        components.SCHEDULER: port_map.scheduler, components.KWOK: port_map.kwok,
    }
    records = read_records(state)
    print(f"state dir: {state.root}")
    print(f"{'COMPONENT':<25} {'STATE':<9} {'PID':>8} {'PORT':>6}  LOG")
    running = 0
    for name in components.START_ORDER:
        record = records.get(name)
        alive = record is not None and procs.is_ours(record)
        running += alive
        pid = str(record.pid) if alive and record else "-"
        print(f"{name:<25} {'running' if alive else 'stopped':<9} {pid:>8} "
              f"{port_of[name]:>6}  {state.log_of(name)}")
    if records.get(components.APISERVER) and procs.is_ours(records[components.APISERVER]):
        try:
            api = ApiClient(f"https://127.0.0.1:{port_map.apiserver}",
                            admin_tls(pki.Pki(state.pki)), timeout=5.0)
            ready, total = _ready_node_count(api)
            all_nodes = len(api.get("/api/v1/nodes")["items"])
            print(f"nodes: {all_nodes} ({ready}/{total} simulated nodes Ready)")
        except (ApiError, OSError) as exc:
            print(f"nodes: unknown ({exc})")
        print(f"kubeconfig: {state.admin_kubeconfig}")
    else:
        print("nodes: - (API server not running)")
    return 0 if running == len(components.START_ORDER) else 3
