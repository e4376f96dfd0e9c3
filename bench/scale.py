"""Scale: N InferenceServices across many namespaces on the local control plane.

    .venv/bin/python bench/scale.py [--services 1000] [--namespaces 50] [--steady 60]

Uses the cluster the environment points at (GPUSERVE_CLUSTER_DIR, GPUSERVE_PORT_OFFSET; start
it with `python -m e2e.cluster up` first), installs the CRDs and example classes, starts the
operator, creates the services (8 client threads) and measures:
- time from the first create until every service is reconciled: status.observedGeneration
  == generation with Ready=True, and its ConfigMap, Deployment, Service and PDB exist;
- the operator's peak RSS (VmRSS of /proc/<pid>/status, sampled every 0.5 s);
- API requests per service, from the API server's apiserver_request_total deltas over the
  run, by resource and verb (these include the controller manager's and KWOK's requests;
  the table says which resources only the operator writes);
- writes per minute once steady (goal 0), over --steady seconds after everything is
  reconciled and a settle pause.

Every service has minReplicas 0 by default: 1,000 services with pods would need 1,000
simulated GPUs and measure the scheduler and KWOK more than the operator. --pods-every K
gives every K-th service one pod; then start the cluster with a node-pool file that has
room (`--nodepools-out FILE` writes one: GPUSERVE_NODEPOOLS=FILE python -m e2e.cluster up).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402
from kubernetes import client  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from e2e.cluster import lifecycle, procs, settings  # noqa: E402
from e2e.cluster.testkit import ClusterHandle, tolerating, wait_for  # noqa: E402
from e2e.invalid_cases import valid_service  # noqa: E402
from e2e.operatorkit import OperatorProcess, install_classes, install_crds  # noqa: E402
from gpuserve.api.models import GROUP, VERSION  # noqa: E402
from gpuserve.resources.naming import SERVICES_PLURAL  # noqa: E402

NS_PREFIX = "gs-scale-"
RECONCILE_TIMEOUT_S = 900.0
# Resources only the operator writes in this benchmark (the bench creates services with
# POST; the controller manager writes deployments/status, replicasets, endpointslices).
OPERATOR_WRITES = {
    ("configmaps", "", "APPLY"), ("deployments", "", "APPLY"), ("services", "", "APPLY"),
    ("poddisruptionbudgets", "", "APPLY"), (SERVICES_PLURAL, "status", "PATCH"),
    (SERVICES_PLURAL, "", "PATCH"), ("pods", "", "PATCH"),
}
MUTATING = {"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"}


def request_counts(cluster: ClusterHandle) -> Counter[tuple[str, str, str]]:
    """apiserver_request_total summed per (resource, subresource, verb)."""
    text = cluster.kubectl("get", "--raw", "/metrics", timeout=120).stdout
    counts: Counter[tuple[str, str, str]] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        fields = {}
        for part in labels[len("apiserver_request_total{"):-1].split(","):
            key, _, val = part.partition("=")
            fields[key] = val.strip('"')
        counts[(fields.get("resource", ""), fields.get("subresource", ""),
                fields.get("verb", ""))] += float(value)
    return counts


class RssSampler(threading.Thread):
    """Peak and last VmRSS of one PID, sampled until stopped."""

    def __init__(self, pid_of: Callable[[], int | None], every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid_of = pid_of
        self.every = every
        self.peak_kib = 0
        self.last_kib = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            pid = self.pid_of()
            kib = procs.rss_kib(pid) if pid else None
            if kib:
                self.last_kib = kib
                self.peak_kib = max(self.peak_kib, kib)
            self.stopped.wait(self.every)


# Runs the operator's entry point with tracemalloc on; SIGUSR2 writes the top allocation
# sites to $GS_TRACEMALLOC_OUT. Only for finding where memory goes: it slows the operator.
TRACEMALLOC_LAUNCHER = """
import os, runpy, signal, sys, tracemalloc
tracemalloc.start(8)
def dump(*_):
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)])
    target = os.environ["GS_TRACEMALLOC_OUT"]
    with open(target + ".part", "w") as out:
        current, peak = tracemalloc.get_traced_memory()
        out.write(f"traced now {current / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB\\n")
        import collections, gc
        kinds = collections.Counter(type(o).__name__ for o in gc.get_objects())
        out.write(f"gc objects by type: {kinds.most_common(12)}\\n")
        for stat in snap.statistics("traceback")[:25]:
            out.write(f"{stat.size / 2**20:8.1f} MiB {stat.count:8d} blocks\\n")
            for line in stat.traceback.format()[-8:]:
                out.write(f"      {line}\\n")
    os.replace(target + ".part", target)  # the reader waits for the whole file
signal.signal(signal.SIGUSR2, dump)
sys.argv = ["gpuserve-operator", *sys.argv[1:]]
runpy.run_module("controllers.entrypoint", run_name="__main__", alter_sys=True)
"""


class TracedOperator(OperatorProcess):
    """OperatorProcess started through TRACEMALLOC_LAUNCHER."""

    def __init__(self, cluster: ClusterHandle, log_path: Path, out: Path,
                 env: dict[str, str]) -> None:
        super().__init__(cluster, log_path, env={**env, "GS_TRACEMALLOC_OUT": str(out)})
        self.out = out

    def start(self, timeout: float = 60.0) -> OperatorProcess:
        env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig), PYTHONUNBUFFERED="1",
                   **self.env)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", TRACEMALLOC_LAUNCHER, "--liveness",
                 f"http://127.0.0.1:{self.port}/healthz"],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        wait_for(self._live, timeout, "operator liveness endpoint")
        return self

    def dump(self) -> str:
        if self.proc is None:
            return ""
        self.out.unlink(missing_ok=True)
        self.proc.send_signal(signal.SIGUSR2)
        wait_for(lambda: self.out.exists() and self.out.stat().st_size > 0, 900,
                 "tracemalloc dump")
        time.sleep(1)
        return self.out.read_text()


class PySpy:
    """py-spy record (raw collapsed stacks) of one PID until stopped; top frames after."""

    def __init__(self, binary: str, pid: int, out: Path, rate: int = 25) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [binary, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate),
             "--nonblocking", "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def top(self, limit: int = 20) -> list[tuple[str, float]]:
        """Share of samples in which each frame appears (inclusive), project and kopf only."""
        inclusive: Counter[str] = Counter()
        total = 0
        for line in self.out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            n = int(count)
            total += n
            # "func (path/file.py:line)": drop the line so a function counts once.
            frames = {re.sub(r":\d+\)$", ")", f) for f in stack.split(";")
                      if re.search(r"\((controllers|gpuserve|kopf|kubernetes|pydantic)/", f)}
            for frame in frames:
                inclusive[frame] += n
        return [(frame, n / total) for frame, n in inclusive.most_common(limit)] if total else []


def service_body(index: int, pods_every: int) -> dict[str, Any]:
    body = valid_service(f"svc-{index:05d}")
    with_pod = pods_every > 0 and index % pods_every == 0
    body["spec"]["scaling"] = {"minReplicas": 1 if with_pod else 0, "maxReplicas": 1}
    return body


def reconciled_count(custom: client.CustomObjectsApi) -> tuple[int, int]:
    """(reconciled, total) over the benchmark's services (one cluster-wide list)."""
    items = custom.list_cluster_custom_object(GROUP, VERSION, SERVICES_PLURAL,
                                              label_selector="gpuserve.io/bench=scale")["items"]
    done = 0
    for obj in items:
        status = obj.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or [])
        done += ready and status.get("observedGeneration") == obj["metadata"]["generation"]
    return done, len(items)


def children_count(api: client.ApiClient) -> dict[str, int]:
    selector = "app.kubernetes.io/managed-by=gpuserve"
    core, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
    return {
        "ConfigMap": len(core.list_config_map_for_all_namespaces(
            label_selector=selector).items),
        "Deployment": len(apps.list_deployment_for_all_namespaces(
            label_selector=selector).items),
        "Service": len(core.list_service_for_all_namespaces(label_selector=selector).items),
        "PodDisruptionBudget": len(policy.list_pod_disruption_budget_for_all_namespaces(
            label_selector=selector).items),
    }


def write_nodepools(path: Path, h100_nodes: int) -> None:
    """The default pools plus more H100 nodes (8 GPUs each), for --pods-every runs."""
    pools = yaml.safe_load(settings.DEFAULT_NODEPOOLS.read_text())
    for pool in pools["pools"]:
        if pool["name"] == "h100":
            pool["count"] = h100_nodes
    path.write_text(yaml.safe_dump(pools, sort_keys=False))


def run(args: argparse.Namespace) -> int:
    state = settings.layout()
    if not lifecycle.is_up(state):
        print(f"no cluster up in {state.root}; run `python -m e2e.cluster up` with the same "
              "GPUSERVE_CLUSTER_DIR / GPUSERVE_PORT_OFFSET first", file=sys.stderr)
        return 2
    cluster = ClusterHandle(state.admin_kubeconfig, started_here=False, local=True)
    api = cluster.api_client()
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    install_crds(cluster)
    install_classes(cluster)
    namespaces = [f"{NS_PREFIX}{i:03d}" for i in range(args.namespaces)]
    for ns in namespaces:
        with tolerating(409):
            core.create_namespace({"metadata": {"name": ns, "labels": {"gpuserve.io/bench":
                                                                      "scale"}}})
    # Pods would be refused until each namespace has its default service account.
    wait_for(lambda: all(core.list_namespaced_service_account(ns).items for ns in namespaces),
             120, "default service accounts")

    log_dir = Path(tempfile.mkdtemp(prefix="gpuserve-scale-"))
    env = dict(item.split("=", 1) for item in args.operator_env)
    operator: OperatorProcess = (
        TracedOperator(cluster, log_dir / "operator.log", log_dir / "tracemalloc.txt", env)
        if args.tracemalloc else OperatorProcess(cluster, log_dir / "operator.log", env=env))
    operator.start()
    spy = (PySpy(args.py_spy, operator.proc.pid, log_dir / "py-spy.txt")
           if args.py_spy and operator.proc else None)
    sampler = RssSampler(lambda: operator.proc.pid if operator.proc else None)
    sampler.start()
    started_rss = procs.rss_kib(operator.proc.pid) if operator.proc else None
    before = request_counts(cluster)

    def create(index: int) -> None:
        body = service_body(index, args.pods_every)
        body["metadata"]["labels"] = {"gpuserve.io/bench": "scale"}
        ns = namespaces[index % len(namespaces)]
        for attempt in range(5):
            try:
                custom.create_namespaced_custom_object(GROUP, VERSION, ns, SERVICES_PLURAL, body)
                return
            except ApiException as exc:
                if exc.status == 409:
                    return
                if exc.status not in (429, 500, 503, 504) or attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))

    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(create, range(args.services)))
        created_s = time.monotonic() - t0
        progress: list[tuple[float, int]] = []
        deadline = t0 + RECONCILE_TIMEOUT_S
        peak_dump = ""
        while True:
            done, total = reconciled_count(custom)
            progress.append((time.monotonic() - t0, done))
            if (isinstance(operator, TracedOperator) and not peak_dump
                    and done >= args.tracemalloc_at > 0):
                peak_dump = operator.dump()
                print(f"tracemalloc with {done} services reconciled:\n{peak_dump}")
            if done == args.services == total:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"only {done}/{args.services} reconciled after "
                                 f"{RECONCILE_TIMEOUT_S:.0f} s; log {operator.log_path}")
            if not operator.alive():
                raise SystemExit(f"operator exited; log {operator.log_path}")
            time.sleep(1.0)
        all_ready_s = time.monotonic() - t0
        children = children_count(api)
        children_s = time.monotonic() - t0
        after_reconcile = request_counts(cluster)
        peak_reconcile_kib = sampler.peak_kib
        time.sleep(args.settle)
        steady_before = request_counts(cluster)
        steady_start = time.monotonic()
        cpu_before = _cpu_seconds(operator.proc.pid if operator.proc else None)
        time.sleep(args.steady)
        steady_after = request_counts(cluster)
        steady_span = time.monotonic() - steady_start
        cpu_after = _cpu_seconds(operator.proc.pid if operator.proc else None)
        if isinstance(operator, TracedOperator):
            print(operator.dump())
        if spy is not None:
            spy.stop()
            print("py-spy, share of samples a frame is on the stack (whole run):")
            for frame, share in spy.top():
                print(f"  {100 * share:5.1f} %  {frame}")
    finally:
        sampler.stopped.set()
        sampler.join(timeout=5)
        if not args.keep:
            cleanup(cluster, operator, namespaces)
        operator.stop()

    reconcile_delta = after_reconcile - before
    steady_delta = steady_after - steady_before
    per_minute = 60.0 / steady_span
    op_writes_reconcile = sum(v for k, v in reconcile_delta.items() if k in OPERATOR_WRITES)
    op_writes_steady = sum(v for k, v in steady_delta.items() if k in OPERATOR_WRITES)
    all_writes_steady = sum(v for k, v in steady_delta.items() if k[2] in MUTATING)
    total_requests = sum(reconcile_delta.values())
    summary = {
        "services": args.services, "namespaces": args.namespaces,
        "operator_env": args.operator_env,
        "pods_every": args.pods_every, "create_s": round(created_s, 1),
        "all_reconciled_s": round(all_ready_s, 1), "children": children,
        "children_checked_s": round(children_s, 1),
        "rss_start_mib": round((started_rss or 0) / 1024, 1),
        "rss_peak_mib": round(sampler.peak_kib / 1024, 1),
        "rss_peak_reconcile_mib": round(peak_reconcile_kib / 1024, 1),
        "rss_end_mib": round(sampler.last_kib / 1024, 1),
        "api_requests_per_service": round(total_requests / args.services, 2),
        "operator_writes_per_service": round(op_writes_reconcile / args.services, 2),
        "steady_operator_writes_per_min": round(op_writes_steady * per_minute, 1),
        "steady_all_writes_per_min": round(all_writes_steady * per_minute, 1),
        "steady_operator_cpu_percent": (
            round(100 * (cpu_after - cpu_before) / steady_span, 1)
            if cpu_before is not None and cpu_after is not None else None),
        "progress": [(round(t, 1), n) for t, n in progress[:: max(1, len(progress) // 20)]],
        "operator_log": str(operator.log_path),
    }
    print_table(summary, reconcile_delta, steady_delta, per_minute, args)
    print(json.dumps(summary))
    return 0


def _cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of a process, in seconds."""
    if pid is None:
        return None
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cleanup(cluster: ClusterHandle, operator: OperatorProcess, namespaces: list[str]) -> None:
    """Deletes the namespaces while the operator still runs (it removes kopf's finalizers
    from the services) and waits until they are gone."""
    if not operator.alive():
        operator.start()
    for ns in namespaces:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)

    def gone() -> bool:
        out = cluster.kubectl("get", "namespaces", "-l", "gpuserve.io/bench=scale", "-o",
                              "name", check=False).stdout
        return not out.strip()

    wait_for(gone, 600, "benchmark namespaces deleted", interval=2.0)


def print_table(summary: dict[str, Any], reconcile: Counter[tuple[str, str, str]],
                steady: Counter[tuple[str, str, str]], per_minute: float,
                args: argparse.Namespace) -> None:
    n = args.services
    print(f"\n{n} InferenceServices in {args.namespaces} namespaces "
          f"({'minReplicas 0' if not args.pods_every else f'one pod per {args.pods_every}'})\n")
    print("| measure | value | goal |")
    print("|---|---|---|")
    print(f"| creating the services (8 client threads) | {summary['create_s']} s | |")
    print(f"| first create -> all reconciled (Ready, observedGeneration current) | "
          f"**{summary['all_reconciled_s']} s** | < 60 s |")
    print(f"| children then present | {summary['children']} | {n} of each |")
    print(f"| operator RSS: start / peak / end | {summary['rss_start_mib']} / "
          f"**{summary['rss_peak_mib']}** / {summary['rss_end_mib']} MiB | peak < 300 MB |")
    print(f"| API requests per service (all clients, until reconciled) | "
          f"{summary['api_requests_per_service']} | |")
    print(f"| operator writes per service (SSA of children, status and pod patches) | "
          f"{summary['operator_writes_per_service']} | |")
    print(f"| operator writes per minute once steady ({args.steady:.0f} s window) | "
          f"**{summary['steady_operator_writes_per_min']}** | 0 |")
    print(f"| all writes per minute once steady (any client) | "
          f"{summary['steady_all_writes_per_min']} | |")
    print(f"| operator CPU once steady | {summary['steady_operator_cpu_percent']} % of a core"
          " | |")
    print("\nRequests until reconciled, per service, by resource and verb (>= 0.05):\n")
    print("| resource | verb | per service | steady, per minute |")
    print("|---|---|---|---|")
    keys = sorted(set(reconcile) | set(steady), key=lambda k: -reconcile.get(k, 0))
    for key in keys:
        per_service = reconcile.get(key, 0) / n
        steady_rate = steady.get(key, 0) * per_minute
        if per_service < 0.05 and steady_rate < 0.05:
            continue
        resource = key[0] + (f"/{key[1]}" if key[1] else "")
        mark = " (operator)" if key in OPERATOR_WRITES else ""
        print(f"| {resource}{mark} | {key[2]} | {per_service:.2f} | {steady_rate:.1f} |")
    print(f"\nprogress (seconds since the first create, services reconciled): "
          f"{summary['progress']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--pods-every", type=int, default=0,
                        help="give every K-th service minReplicas 1 (0: none)")
    parser.add_argument("--settle", type=float, default=20.0,
                        help="seconds after all are reconciled before the steady window")
    parser.add_argument("--steady", type=float, default=60.0,
                        help="length of the steady-state write window, seconds")
    parser.add_argument("--keep", action="store_true",
                        help="leave the services and namespaces in place")
    parser.add_argument("--operator-env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment of the operator process (repeatable), e.g. "
                        "MALLOC_ARENA_MAX=2")
    parser.add_argument("--py-spy", metavar="PATH",
                        help="py-spy binary: sample the operator during the run, print top frames")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="run the operator under tracemalloc; print top allocation sites")
    parser.add_argument("--tracemalloc-at", type=int, default=0, metavar="N",
                        help="also dump them once N services are reconciled (mid-burst)")
    parser.add_argument("--nodepools-out", type=Path,
                        help="write a node-pool file with room for --pods-every and exit")
    parser.add_argument("--h100-nodes", type=int, default=16,
                        help="H100 nodes (8 GPUs each) in the --nodepools-out file")
    args = parser.parse_args()
    if args.nodepools_out:
        write_nodepools(args.nodepools_out, args.h100_nodes)
        print(f"wrote {args.nodepools_out}; start the cluster with "
              f"GPUSERVE_NODEPOOLS={args.nodepools_out} python -m e2e.cluster up")
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
