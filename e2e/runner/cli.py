"""Command line of the local data plane: Prometheus + runner, a status table every few
seconds, a clean stop on Ctrl-C / SIGTERM or after ``--duration``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from pathlib import Path

from e2e.runner.dataplane import LocalDataPlane
from e2e.runner.runner import LocalRunner, RunnerSettings
from e2e.runner.targets import InstanceInfo


def table(infos: list[InstanceInfo]) -> str:
    rows = [("NAMESPACE", "POD", "CLASS", "ROLE", "STATE", "READY", "GRPC", "METRICS")]
    rows += [
        (
            i.namespace,
            i.pod,
            i.accelerator_class,
            i.role,
            i.state,
            "yes" if i.pod_ready else "no",
            i.grpc or "-",
            i.metrics or "-",
        )
        for i in sorted(infos, key=lambda i: (i.namespace, i.pod))
    ]
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.runner", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, default=os.environ.get("KUBECONFIG"))
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="serve only these namespaces (repeatable; default: all)",
    )
    parser.add_argument(
        "--no-prometheus", action="store_true", help="run Tritons only, no Prometheus"
    )
    parser.add_argument("--prometheus-port", type=int, default=None)
    parser.add_argument(
        "--log-dir", type=Path, default=None, help="keep Triton logs and repositories here"
    )
    parser.add_argument("--duration", type=float, default=None, help="stop after N seconds")
    parser.add_argument("--every", type=float, default=5.0, help="status table period (s)")
    parser.add_argument("--verbose", "-v", action="store_true")
    args = parser.parse_args(argv)
    if args.kubeconfig is None:
        parser.error("--kubeconfig (or $KUBECONFIG) is required")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = RunnerSettings(namespaces=frozenset(args.namespace) or None, log_dir=args.log_dir)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    deadline = time.monotonic() + args.duration if args.duration else None
    if args.no_prometheus:
        runner = LocalRunner(args.kubeconfig, settings=settings).start()
        plane = None
    else:
        plane = LocalDataPlane(
            args.kubeconfig, settings=settings, prometheus_port=args.prometheus_port
        ).start()
        runner = plane.runner
        print(f"Prometheus: {plane.prometheus_url}", flush=True)
        # What an operator started by hand against this data plane needs in its env.
        print(" ".join(f"{k}={v}" for k, v in plane.operator_env.items()), flush=True)
    try:
        while not done.is_set():
            print(table(runner.instances()), flush=True)
            wait = args.every if deadline is None else min(args.every, deadline - time.monotonic())
            if wait <= 0 or done.wait(wait):
                break
    finally:
        if plane is not None:
            plane.stop()
        else:
            runner.stop()
    return 0
