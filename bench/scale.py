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
  reconciled and a settle pause;
- CPU seconds of the operator and of each control-plane process during the burst (where
  the two cores went);
- the operator runs in a memory cgroup with the chart's limit (--memory-limit; an overrun
  is an OOM kill the bench reports), optionally under memray (--memray: where the heap is
  at its high-water mark), and can be killed with SIGKILL and restarted mid-burst
  (--kill-at N); at the end every child is checked: no orphan, no duplicate, none missing.

Every service has minReplicas 0 by default: 1,000 services with pods would need 1,000
simulated GPUs and measure the scheduler and KWOK more than the operator. --pods-every K
gives every K-th service --pods pods (default 1); then start the cluster with a node-pool
file that has room (`--nodepools-out FILE` writes one: GPUSERVE_NODEPOOLS=FILE python -m
e2e.cluster up).
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
from kubernetes import watch as kwatch  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from e2e.cluster import lifecycle, procs, settings  # noqa: E402
from e2e.cluster.testkit import ClusterHandle, tolerating, wait_for  # noqa: E402
from e2e.invalid_cases import valid_service  # noqa: E402
from e2e.memlimit import CgroupUnavailable, MemoryCgroup, parse_bytes  # noqa: E402
from e2e.memprofile import high_water_mark, memray_launcher, print_high_water_mark  # noqa: E402
from e2e.operatorkit import OperatorProcess, install_classes, install_crds  # noqa: E402
from gpuserve.api.models import GROUP, VERSION  # noqa: E402
from gpuserve.resources.naming import (  # noqa: E402
    LABEL_CLASS,
    LABEL_POOL,
    LABEL_SERVICE,
    SERVICES_PLURAL,
)

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


def service_body(index: int, pods_every: int, pods: int) -> dict[str, Any]:
    body = valid_service(f"svc-{index:05d}")
    with_pods = pods_every > 0 and index % pods_every == 0
    replicas = pods if with_pods else 0
    body["spec"]["scaling"] = {"minReplicas": replicas, "maxReplicas": max(1, replicas)}
    return body


BENCH_LABEL = "gpuserve.io/bench=scale"


def _reconciled(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    return bool(ready and status.get("observedGeneration") == obj["metadata"]["generation"])


class ReconciledWatch(threading.Thread):
    """Which of the benchmark's services are reconciled, kept by a watch. Listing every
    service once a second cost the API server more than the operator's own requests at
    5,000 services (each list is tens of MB of JSON); a watch sends each change once."""

    def __init__(self, custom: client.CustomObjectsApi) -> None:
        super().__init__(daemon=True)
        self.custom = custom
        self.state: dict[tuple[str, str], bool] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def counts(self) -> tuple[int, int]:
        """(reconciled, total) as last seen."""
        with self.lock:
            return sum(self.state.values()), len(self.state)

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                listed = self.custom.list_cluster_custom_object(
                    GROUP, VERSION, SERVICES_PLURAL, label_selector=BENCH_LABEL)
                with self.lock:
                    self.state = {_key(o): _reconciled(o) for o in listed["items"]}
                self._follow(listed["metadata"]["resourceVersion"])
            except Exception as exc:  # an expired watch or a restarted API server: list again
                print(f"watch of services: {exc}; listing again", file=sys.stderr)
                time.sleep(1.0)

    def _follow(self, resource_version: str) -> None:
        watch = kwatch.Watch()
        for event in watch.stream(self.custom.list_cluster_custom_object, GROUP, VERSION,
                                  SERVICES_PLURAL, label_selector=BENCH_LABEL,
                                  resource_version=resource_version, timeout_seconds=60):
            obj = event["object"]
            with self.lock:
                if event["type"] == "DELETED":
                    self.state.pop(_key(obj), None)
                else:
                    self.state[_key(obj)] = _reconciled(obj)
            if self.stopped.is_set():
                watch.stop()
                return


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


def _children(api: client.ApiClient) -> list[Any]:
    selector = "app.kubernetes.io/managed-by=gpuserve"
    core, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
    return [
        *core.list_config_map_for_all_namespaces(label_selector=selector).items,
        *apps.list_deployment_for_all_namespaces(label_selector=selector).items,
        *core.list_service_for_all_namespaces(label_selector=selector).items,
        *policy.list_pod_disruption_budget_for_all_namespaces(label_selector=selector).items,
    ]


def children_report(api: client.ApiClient,
                    custom: client.CustomObjectsApi) -> tuple[dict[str, int], list[str]]:
    """Children per kind, and what is wrong: a child whose owner is gone (orphan), two
    children in one slot (same service, kind, class and pool: a duplicate), or a service
    missing a kind."""
    services = custom.list_cluster_custom_object(
        GROUP, VERSION, SERVICES_PLURAL, label_selector=BENCH_LABEL)["items"]
    uids = {obj["metadata"]["uid"] for obj in services}
    counts: Counter[str] = Counter()
    slots: Counter[tuple[str, str, str, str]] = Counter()
    kinds_of: dict[str, set[str]] = {uid: set() for uid in uids}
    problems: list[str] = []
    for child in _children(api):
        kind = type(child).__name__.removeprefix("V1")
        meta = child.metadata
        counts[kind] += 1
        owners = [ref.uid for ref in meta.owner_references or []]
        owner = next((uid for uid in owners if uid in uids), None)
        if owner is None:
            problems.append(f"orphan {kind} {meta.namespace}/{meta.name}")
            continue
        labels = meta.labels or {}
        slot = (owner, kind, labels.get(LABEL_CLASS, ""), labels.get(LABEL_POOL, ""))
        slots[slot] += 1
        if slots[slot] == 2:
            problems.append(f"duplicate {kind} for {meta.namespace}/{labels.get(LABEL_SERVICE)}")
        kinds_of[owner].add(kind)
    wanted = {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget"}
    for obj in services:
        missing = wanted - kinds_of[obj["metadata"]["uid"]]
        if missing:
            meta = obj["metadata"]
            problems.append(f"{meta['namespace']}/{meta['name']} lacks {sorted(missing)}")
    return dict(counts), problems


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
    limit = MemoryCgroup(f"gpuserve-scale-{os.getpid()}", parse_bytes(args.memory_limit))
    if args.memory_limit != "0":
        try:
            limit.create()
        except CgroupUnavailable as exc:
            print(f"{exc}; run with --memory-limit 0 to measure without a limit",
                  file=sys.stderr)
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
    capture = log_dir / "operator.memray"
    operator = OperatorProcess(
        cluster, log_dir / "operator.log", env=env,
        launcher=memray_launcher(capture) if args.memray else (),
        cgroup=limit if limit.path else None)
    operator.start()
    spy = (PySpy(args.py_spy, operator.proc.pid, log_dir / "py-spy.txt")
           if args.py_spy and operator.proc else None)
    sampler = RssSampler(lambda: operator.proc.pid if operator.proc else None)
    sampler.start()
    started_rss = procs.rss_kib(operator.proc.pid) if operator.proc else None
    before = request_counts(cluster)
    restarts: list[tuple[int, float]] = []  # (reconciled when killed, seconds to converge)

    def create(index: int) -> None:
        body = service_body(index, args.pods_every, args.pods)
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

    burst_start_cpu = cpu_by_process(state, operator)
    reconciled = ReconciledWatch(custom)
    reconciled.start()
    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(create, range(args.services)))
        created_s = time.monotonic() - t0
        progress: list[tuple[float, int]] = []
        deadline = t0 + RECONCILE_TIMEOUT_S
        while True:
            done, total = reconciled.counts()
            progress.append((time.monotonic() - t0, done))
            if done >= args.kill_at > 0 and not restarts:
                # A crash in the middle of the burst: nothing is flushed, the new process
                # lists every object again.
                operator.kill9()
                killed_at = time.monotonic()
                operator.start()
                restarts.append((done, killed_at - t0))
                print(f"kill -9 at {done} reconciled ({killed_at - t0:.1f} s); restarted",
                      flush=True)
            if done == args.services == total:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"only {done}/{args.services} reconciled after "
                                 f"{RECONCILE_TIMEOUT_S:.0f} s; log {operator.log_path}")
            if not operator.alive():
                raise SystemExit(f"operator exited (OOM kills in its cgroup: "
                                 f"{limit.oom_kills() if limit.path else 'no cgroup'}); "
                                 f"log {operator.log_path}")
            time.sleep(1.0)
        all_ready_s = time.monotonic() - t0
        burst_cpu = cpu_by_process(state, operator)
        burst_cpu = {name: round(burst_cpu[name] - burst_start_cpu.get(name, 0.0), 1)
                     for name in burst_cpu}
        children, problems = children_report(api, custom)
        children_s = time.monotonic() - t0
        after_reconcile = request_counts(cluster)
        peak_reconcile_kib = sampler.peak_kib
        time.sleep(args.settle)
        steady_before = request_counts(cluster)
        steady_start = time.monotonic()
        cpu_before = process_cpu_seconds(operator.proc.pid if operator.proc else None)
        time.sleep(args.steady)
        steady_after = request_counts(cluster)
        steady_span = time.monotonic() - steady_start
        cpu_after = process_cpu_seconds(operator.proc.pid if operator.proc else None)
        if spy is not None:
            spy.stop()
            print("py-spy, share of samples a frame is on the stack (whole run):")
            for frame, share in spy.top():
                print(f"  {100 * share:5.1f} %  {frame}")
    finally:
        reconciled.stopped.set()
        sampler.stopped.set()
        sampler.join(timeout=5)
        oom_kills = limit.oom_kills() if limit.path else None
        cgroup_peak = limit.peak_bytes() if limit.path else 0
        if not args.keep:
            cleanup(cluster, operator, namespaces)
        operator.stop()
        limit.remove()
    if args.memray:
        print_high_water_mark(high_water_mark(capture))

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
        "pods_every": args.pods_every, "pods": args.pods, "create_s": round(created_s, 1),
        "all_reconciled_s": round(all_ready_s, 1), "children": children,
        "children_checked_s": round(children_s, 1),
        "child_problems": problems[:20], "child_problem_count": len(problems),
        "restarts": restarts, "memory_limit": args.memory_limit, "oom_kills": oom_kills,
        "cgroup_peak_mib": round(cgroup_peak / 2**20, 1),
        "burst_cpu_s": burst_cpu,
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


def cpu_by_process(state: settings.StateLayout, operator: OperatorProcess) -> dict[str, float]:
    """CPU seconds used so far by the operator and each control-plane process (after a
    restart, the operator's count starts again)."""
    pids = {name: record.pid for name, record in lifecycle.read_records(state).items()}
    if operator.proc is not None:
        pids["operator"] = operator.proc.pid
    return {name: seconds for name, pid in pids.items()
            if (seconds := process_cpu_seconds(pid)) is not None}


def process_cpu_seconds(pid: int | None) -> float | None:
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
    """Deletes the namespaces (the operator still running, as in a cluster) and waits
    until they are gone."""
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
    pods = (f"{args.pods} pod(s) for one service in {args.pods_every}" if args.pods_every
            else "minReplicas 0")
    print(f"\n{n} InferenceServices in {args.namespaces} namespaces ({pods})\n")
    print("| measure | value | goal |")
    print("|---|---|---|")
    print(f"| creating the services (8 client threads) | {summary['create_s']} s | |")
    print(f"| first create -> all reconciled (Ready, observedGeneration current) | "
          f"**{summary['all_reconciled_s']} s** | < 30 s at 1,000 |")
    print(f"| children then present | {summary['children']} | {n} of each |")
    print(f"| operator RSS: start / peak / end | {summary['rss_start_mib']} / "
          f"**{summary['rss_peak_mib']}** / {summary['rss_end_mib']} MiB | peak < 256 MiB |")
    print(f"| enforced memory limit (cgroup) / its peak charge / OOM kills | "
          f"{summary['memory_limit']} / {summary['cgroup_peak_mib']} MiB / "
          f"**{summary['oom_kills']}** | 0 kills |")
    busiest = sorted(summary["burst_cpu_s"].items(), key=lambda item: -item[1])
    print(f"| CPU seconds from the first create until all reconciled (2 cores: "
          f"{2 * summary['all_reconciled_s']:.0f} available) | "
          f"{', '.join(f'{name} {sec}' for name, sec in busiest)} | |")
    for done, at in summary["restarts"]:
        print(f"| kill -9 and restart | at {at:.1f} s, {done} reconciled | converges |")
    print(f"| orphaned, duplicated or missing children | **{summary['child_problem_count']}**"
          f" {summary['child_problems'][:3] or ''} | 0 |")
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


def chart_memory_limit() -> str:
    values = yaml.safe_load((REPO / "charts" / "gpuserve" / "values.yaml").read_text())
    return str(values["resources"]["limits"]["memory"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--pods", type=int, default=1,
                        help="pods (minReplicas) of each service that has pods")
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
    parser.add_argument("--memray", action="store_true",
                        help="run the operator under memray; print where the heap is at its "
                        "high-water mark")
    parser.add_argument("--memory-limit", default=chart_memory_limit(), metavar="QUANTITY",
                        help="hard memory limit of the operator's cgroup (default: the chart's "
                        "resources.limits.memory, %(default)s; 0: none)")
    parser.add_argument("--kill-at", type=int, default=0, metavar="N",
                        help="kill -9 the operator once N services are reconciled, restart it")
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
