"""Closed-loop fidelity: a bursty slice against the operator and through the simulator.

The same arrivals (``gpuserve.sim.generators.bursty``, seeded, compressed to a few minutes)
are replayed open-loop against one InferenceService on the local stack - real control
plane, the operator's autoscaler, real Prometheus, a real tritonserver per pod - and fed to
the simulator with the same service, the same policy and the stack's own timings (scrape
and evaluation intervals, the controller's rate window, the start-up time measured in this
run). Printed: attainment, p95, mean and peak serving replicas, and how far the two replica
curves are apart second by second.

    .venv/bin/python bench/closed_loop.py [--seconds 150] [--mean-rate 60] [--seed 7]

Uses the harness cluster if up, else starts one (GPUSERVE_CLUSTER_DIR/PORT_OFFSET apply).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.loadgen import Limits, LoadResult, Target, percentile
from e2e.loadgen.runner import replay
from e2e.loadgen.trace import Arrival
from e2e.manifests import sleeper_service
from e2e.operatorkit import EXAMPLE_CLASSES
from e2e.runner.stack import Stack, apply, harness_cluster, local_stack, scratch_namespace
from gpuserve.api.models import (
    GROUP,
    VERSION,
    AcceleratorClassSpec,
    parse_accelerator_class,
    parse_inference_service,
)
from gpuserve.autoscaling.from_spec import policy_config_from_spec
from gpuserve.autoscaling.query_windows import QueryWindows
from gpuserve.resources.naming import SERVICES_PLURAL
from gpuserve.sim.from_spec import default_times, sim_config_from_spec
from gpuserve.sim.generators import bursty
from gpuserve.sim.results import SimResult
from gpuserve.sim.scalers import GpuserveScaler
from gpuserve.sim.simulating import simulate
from gpuserve.sim.workload import Workload

SLO_S = 0.150
EVALUATION_S = 2.0  # the stack's autoscaler interval (local_stack's default)
SCRAPE_S = 1.0  # the stack's Prometheus scrape interval
RATE_WINDOW_S = QueryWindows(SCRAPE_S).rate_window_s  # what the operator queries behind it
POLL_S = 0.5


def service(name: str) -> dict[str, Any]:
    """The sleeper (40 ms + 2 ms/item batches of up to 8): one replica plans ~120 req/s."""
    return sleeper_service(
        name,
        classes=["l4"],
        slo=f"{SLO_S * 1000:g}ms",
        scaling={
            "minReplicas": 1,
            "maxReplicas": 4,
            "warmPool": 0,
            "scaleDownStabilization": "20s",
            "stableWindow": "20s",
            "panicWindow": "6s",
        },
        triton={"exitTimeoutSeconds": 5},
    )


def bursty_slice(mean_rate: float, seconds: float, seed: int) -> Workload:
    return bursty(mean_rate=mean_rate, duration=seconds, seed=seed, mean_quiet=20.0)


@dataclass(frozen=True)
class Sample:
    at: float  # seconds after the replay started
    replicas: int  # serving replicas ready (status.replicas)
    desired: int
    routed_around: int  # pods in status.routedAround (rule 9)


@dataclass(frozen=True)
class RealRun:
    load: LoadResult
    samples: tuple[Sample, ...]


class Sampler:
    """Polls the service's status until stopped (bounded by ``limit_s``)."""

    def __init__(self, cluster: ClusterHandle, namespace: str, name: str, limit_s: float):
        from kubernetes import client

        self._api = client.CustomObjectsApi(cluster.api_client())
        self._where = (namespace, name)
        self._limit = limit_s
        self._stop = threading.Event()
        self.t0 = time.monotonic()
        self.samples: list[Sample] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Sampler:
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> tuple[Sample, ...]:
        self._stop.set()
        self._thread.join(timeout=10)
        return tuple(self.samples)

    def _run(self) -> None:
        ns, name = self._where
        while not self._stop.is_set() and time.monotonic() - self.t0 < self._limit:
            try:
                obj = self._api.get_namespaced_custom_object(
                    GROUP, VERSION, ns, SERVICES_PLURAL, name, _request_timeout=5
                )
                status: dict[str, Any] = (obj if isinstance(obj, dict) else {}).get("status") or {}
                self.samples.append(
                    Sample(
                        at=time.monotonic() - self.t0,
                        replicas=int(status.get("replicas", 0)),
                        desired=int(status.get("desiredReplicas", 0)),
                        routed_around=len(status.get("routedAround") or []),
                    )
                )
            except Exception:
                pass
            self._stop.wait(POLL_S)


def run_real(stack: Stack, namespace: str, name: str, workload: Workload) -> RealRun:
    """Applies the service, waits for 1 ready replica, replays the slice and samples status."""
    cluster = stack.cluster
    apply(cluster, namespace, service(name))

    def settled() -> bool:
        from e2e.runner.stack import condition, service_status

        status = service_status(cluster, namespace, name)
        ready = condition(status, "Ready")
        metrics = condition(status, "MetricsAvailable")
        return bool(
            ready
            and ready["status"] == "True"
            and metrics
            and metrics["status"] == "True"
            and status.get("replicas") == 1
        )

    wait_for(settled, 180, f"{name} Ready with fresh metrics and 1 replica")
    arrivals = [Arrival(t, 1, 1) for t in workload.arrivals]
    target = Target(
        model="sleeper",
        endpoints=stack.plane.runner.endpoints_for(namespace, name),
        request_timeout_s=10.0,
    )
    duration = workload.arrivals[-1] if workload.arrivals else 0.0
    limits = Limits(max_requests=len(arrivals) + 10, max_wall_s=duration + 60)
    sampler = Sampler(cluster, namespace, name, limit_s=duration + 90).start()
    load = replay(arrivals, target, limits, mode="trace")
    return RealRun(load, sampler.stop())


def start_up_time(samples: tuple[Sample, ...], fallback: float = 2.0) -> float:
    """Median time from the autoscaler asking for more pods to those pods serving."""
    lags = []
    for i in range(1, len(samples)):
        before, now = samples[i - 1], samples[i]
        if now.desired > before.desired:
            ready = next((s.at for s in samples[i:] if s.replicas >= now.desired), None)
            if ready is not None:
                lags.append(ready - now.at + POLL_S / 2)
    median = percentile(lags, 50)
    return median if median is not None else fallback


def load_classes(path: Path = EXAMPLE_CLASSES) -> dict[str, AcceleratorClassSpec]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    parsed = [parse_accelerator_class(d) for d in docs if d.get("kind") == "AcceleratorClass"]
    return {c.metadata.name: c.spec for c in parsed}


def simulate_slice(workload: Workload, cold_start: float, seed: int) -> SimResult:
    """The same service, policy and stack timings in the simulator."""
    spec = parse_inference_service(service("sim")).spec
    classes = load_classes()
    times = replace(default_times(spec), cold_start=cold_start, warm_start=cold_start)
    config = replace(
        sim_config_from_spec(
            spec=spec, classes=classes, times=times, scrape_interval=SCRAPE_S, seed=seed
        ),
        rate_window=RATE_WINDOW_S,
    )
    policy = replace(
        policy_config_from_spec(
            spec, classes, rate_window=RATE_WINDOW_S, scrape_interval=SCRAPE_S
        ),
        cold_start=cold_start,
    )
    scaler = GpuserveScaler(config=policy, interval=EVALUATION_S)
    return simulate(config=config, workload=workload, scaler=scaler)


@dataclass(frozen=True)
class Comparison:
    seconds: float
    requests: int
    start_up: float
    real_attainment: float
    sim_attainment: float
    real_p95_ms: float
    sim_p95_ms: float
    real_mean_replicas: float
    sim_mean_replicas: float
    real_peak: int
    sim_peak: int
    mean_abs_gap: float  # replicas, averaged over seconds
    within_one: float  # share of seconds where the two differ by at most one replica
    real_routed_around: float  # share of seconds with a pod routed around (rule 9)
    sim_routed_around: float
    real_failures: int
    failure_kinds: str  # the commonest errors of failed requests, with their counts

    def table(self) -> str:
        rows = [
            (
                "requests within the SLO",
                f"{self.real_attainment:.2%}",
                f"{self.sim_attainment:.2%}",
            ),
            ("p95 latency ms", f"{self.real_p95_ms:.0f}", f"{self.sim_p95_ms:.0f}"),
            (
                "mean serving replicas",
                f"{self.real_mean_replicas:.2f}",
                f"{self.sim_mean_replicas:.2f}",
            ),
            ("peak serving replicas", str(self.real_peak), str(self.sim_peak)),
            (
                "seconds with a pod routed around",
                f"{self.real_routed_around:.0%}",
                f"{self.sim_routed_around:.0%}",
            ),
        ]
        lines = [
            f"{self.requests} requests over {self.seconds:.0f}s; start-up measured "
            f"{self.start_up:.1f}s; real failures {self.real_failures}"
            + (f" ({self.failure_kinds})" if self.failure_kinds else ""),
            "| figure | real loop | simulator |",
            "|---|---|---|",
            *(f"| {a} | {b} | {c} |" for a, b, c in rows),
            f"replicas second by second: mean |real - sim| {self.mean_abs_gap:.2f}, "
            f"within one replica {self.within_one:.0%} of seconds",
        ]
        return "\n".join(lines)


def _per_second(points: list[tuple[float, int]], seconds: int) -> list[int]:
    """A step curve (value held from each point on) read at every whole second."""
    curve, i, last = [], 0, points[0][1] if points else 1
    for second in range(seconds):
        while i < len(points) and points[i][0] <= second:
            last = points[i][1]
            i += 1
        curve.append(last)
    return curve


def compare(real: RealRun, sim: SimResult, workload: Workload, start_up: float) -> Comparison:
    seconds = max(1, math.ceil(workload.arrivals[-1])) if workload.arrivals else 1
    real_curve = _per_second([(x.at, x.replicas) for x in real.samples], seconds)
    sim_curve = _per_second([(p.at, p.serving_ready) for p in sim.timeline], seconds)
    real_around = _per_second([(x.at, x.routed_around) for x in real.samples], seconds)
    sim_around = _per_second([(p.at, p.routed_around) for p in sim.timeline], seconds)
    gaps = [abs(a - b) for a, b in zip(real_curve, sim_curve, strict=True)]
    records = real.load.records
    within = sum(1 for r in records if r.ok and r.latency_s is not None and r.latency_s <= SLO_S)
    latencies = [r.latency_s if r.ok and r.latency_s is not None else math.inf for r in records]
    return Comparison(
        seconds=float(seconds),
        requests=len(records),
        start_up=start_up,
        real_attainment=within / len(records) if records else 1.0,
        sim_attainment=sim.attainment(),
        real_p95_ms=(percentile(latencies, 95) or math.nan) * 1e3,
        sim_p95_ms=sim.percentile(95) * 1e3,
        real_mean_replicas=sum(real_curve) / seconds,
        sim_mean_replicas=sum(sim_curve) / seconds,
        real_peak=max(real_curve),
        sim_peak=max(sim_curve),
        mean_abs_gap=sum(gaps) / seconds,
        within_one=sum(1 for g in gaps if g <= 1) / seconds,
        real_routed_around=sum(1 for n in real_around if n) / seconds,
        sim_routed_around=sum(1 for n in sim_around if n) / seconds,
        real_failures=real.load.failures,
        failure_kinds=", ".join(
            f"{n} x {error}"
            for error, n in Counter(r.error[:80] for r in records if not r.ok).most_common(3)
        ),
    )


def closed_loop(
    stack: Stack, namespace: str, *, seconds: float, mean_rate: float, seed: int
) -> Comparison:
    workload = bursty_slice(mean_rate, seconds, seed)
    real = run_real(stack, namespace, "bursty-loop", workload)
    start_up = start_up_time(real.samples)
    sim = simulate_slice(workload, start_up, seed)
    return compare(real, sim, workload, start_up)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--mean-rate", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    with (
        harness_cluster() as cluster,
        tempfile.TemporaryDirectory() as tmp,
        scratch_namespace(cluster, "bench-closed-loop") as ns,
        local_stack(
            cluster,
            Path(tmp),
            namespaces=frozenset({ns}),
            autoscale_interval_s=EVALUATION_S,
            scrape_interval_s=SCRAPE_S,
        ) as stack,
    ):
        result = closed_loop(
            stack, ns, seconds=args.seconds, mean_rate=args.mean_rate, seed=args.seed
        )
    print(
        f"bursty slice: seed {args.seed}, {args.mean_rate:g} req/s mean over "
        f"{args.seconds:g}s (quiet spells 20 s, bursts 40 s mean)"
    )
    print(result.table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
