"""Benchmark of the local cluster harness: start-up time, build times, memory.

Runs `python -m e2e.cluster up` / `down` N times against a throwaway state dir and shifted
ports (so a cluster already running is not disturbed), with the cached binaries, and prints:
- wall time of `up` until the cluster is ready (nodes Ready, controllers working): median,
- recorded build times of each binary (from the build step's stamps) and, when present, the
  first cold control-plane build recorded next to it (<cache>/build/cp.time),
- RSS and PSS of each daemon (from /proc) a few seconds after start.

Usage: python bench/cluster_startup.py [--runs 5] [--settle 5] [--port-offset 2000]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e.cluster import binaries, components, lifecycle, procs, reaping, settings

UP_TIMEOUT_S = 300.0
DOWN_TIMEOUT_S = 120.0


def run_cli(command: str, env: dict[str, str], timeout: float) -> tuple[float, str]:
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "e2e.cluster", command],
                            cwd=settings.REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=timeout)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        raise SystemExit(f"`{command}` failed:\n{result.stdout}\n{result.stderr}")
    return elapsed, result.stdout


def cold_controlplane_seconds() -> float | None:
    """`real` from the time(1) output the first manual build left in <cache>/build/cp.time."""
    try:
        text = (settings.build_log_dir() / "cp.time").read_text()
    except OSError:
        return None
    match = re.search(r"real\s+(\d+)m([\d.]+)s", text)
    return int(match[1]) * 60 + float(match[2]) if match else None


def measure(runs: int, settle: float, port_offset: int) -> None:
    binaries.require_runtime()
    reaping.become_subreaper()  # the daemons outlive `up`; adopt them so they get reaped
    up_times: list[float] = []
    down_times: list[float] = []
    rss: dict[str, list[int]] = {name: [] for name in components.START_ORDER}
    pss: dict[str, list[int]] = {name: [] for name in components.START_ORDER}
    with tempfile.TemporaryDirectory(prefix="gpuserve-bench-") as tmp:
        env = dict(os.environ, GPUSERVE_CLUSTER_DIR=tmp,
                   GPUSERVE_PORT_OFFSET=str(port_offset))
        state = settings.StateLayout(Path(tmp))
        for run in range(1, runs + 1):
            up_s, _ = run_cli("up", env, UP_TIMEOUT_S)
            time.sleep(settle)
            records = lifecycle.read_records(state)
            for name, record in records.items():
                for table, reader in ((rss, procs.rss_kib), (pss, procs.pss_kib)):
                    value = reader(record.pid)
                    if value is not None:
                        table[name].append(value)
            down_s, _ = run_cli("down", env, DOWN_TIMEOUT_S)
            reaping.reap([r.pid for r in records.values()])
            up_times.append(up_s)
            down_times.append(down_s)
            print(f"run {run}/{runs}: up {up_s:.2f} s, down {down_s:.2f} s", file=sys.stderr)

    print("| measure | value |")
    print("|---|---|")
    print(f"| `up` to ready cluster, cached binaries (median of {runs}) | "
          f"{statistics.median(up_times):.2f} s (min {min(up_times):.2f}, "
          f"max {max(up_times):.2f}) |")
    print(f"| `down` (median of {runs}) | {statistics.median(down_times):.2f} s |")
    for label, seconds in binaries.build_timings().items():
        print(f"| build {label} (recorded by `build`) | {seconds:.1f} s |")
    cold = cold_controlplane_seconds()
    if cold is not None:
        print(f"| first cold build controlplane {settings.KUBERNETES_VERSION} (cp.time) | "
              f"{cold:.1f} s |")
    totals = {"RSS": 0, "PSS": 0}
    for name in components.START_ORDER:
        cells = []
        for label, table in (("RSS", rss), ("PSS", pss)):
            if table[name]:
                median_kib = int(statistics.median(table[name]))
                totals[label] += median_kib
                cells.append(f"{label} {median_kib / 1024:.0f} MiB")
        print(f"| memory of {name} ({settle:.0f} s after ready, median) | "
              f"{', '.join(cells)} |")
    print(f"| memory of all daemons | RSS {totals['RSS'] / 1024:.0f} MiB (counts the shared "
          f"binary once per process), PSS {totals['PSS'] / 1024:.0f} MiB |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds after `up` before reading RSS")
    parser.add_argument("--port-offset", type=int, default=2000,
                        help="shift of the default ports, to run beside another cluster")
    args = parser.parse_args()
    measure(args.runs, args.settle, args.port_offset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
