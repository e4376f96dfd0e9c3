"""What the measured compute time does to gpuserve's KEDA rendering, on models that are
faster or slower than their spec states.

    .venv/bin/python bench/keda_calibration.py [--factors 0.5 2 3 4 8] [--seed 1]

Each row replays one service through `gpuserve simulate` (in-process): examples/keda-
engine.yaml (dynamic batching up to 16, service times unstated: priors 5 ms + 0.2 ms an
item) and the same without batching, on a model that really takes ``factor`` times the
stated times (a ServiceTimes document), under four workloads: the Azure conversation
trace at 16x, Poisson at 100 req/s, on/off bursts and a slow drift (both 60 req/s on
average, seeded, 10 minutes); the batching service at six times the generated loads.
Columns: the ScaledObject with the operator's measurement (`gpuserve-keda`), the threshold
as rendered from the spec alone (`--no-keda-calibration`), the builtin engine, and the
oracle; each cell is attainment (% of requests within the objective) and GPU-hours.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cli.main import main as gpuserve  # noqa: E402
from gpuserve.sim.argtypes import positive_int, positive_number  # noqa: E402
from gpuserve.sim.generators import bursty, drift  # noqa: E402
from gpuserve.sim.workload import Workload, poisson_workload  # noqa: E402

EXAMPLE = REPO / "examples" / "keda-engine.yaml"
CLASSES = REPO / "examples" / "accelerator-classes.yaml"
AZURE = REPO / "traces" / "azure-llm-conv-2023.csv"
STATED_MS = (5.0, 0.2)  # the priors examples/keda-engine.yaml is rendered with
DURATION_S = 600.0
BATCHED_LOAD = 6.0
COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("measured", ("--policy", "gpuserve-keda")),
    ("as rendered", ("--policy", "gpuserve-keda", "--no-keda-calibration")),
    ("builtin", ("--policy", "gpuserve")),
    ("oracle", ("--policy", "oracle")),
)


def _services(folder: Path) -> dict[str, tuple[Path, float]]:
    """Each service's file and the load it is replayed at, as a multiple of the base
    workloads' (a batching pod serves several times the requests)."""
    body = yaml.safe_load(EXAMPLE.read_text())
    batched = folder / "batched.yaml"
    batched.write_text(yaml.safe_dump(body))
    body["spec"]["batching"] = {"maxBatchSize": 0}
    single = folder / "unbatched.yaml"
    single.write_text(yaml.safe_dump(body))
    return {"no batching": (single, 1.0), "batch 16": (batched, BATCHED_LOAD)}


def _write_trace(path: Path, workload: Workload) -> Path:
    rows = "\n".join(f"{t:.4f},100,10" for t in workload.arrivals)
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows + "\n")
    return path


def _workloads(folder: Path, seed: int, load: float) -> dict[str, tuple[Path, float]]:
    """Each workload's trace file and the compression it is replayed at."""
    made: dict[str, Callable[[], Workload]] = {
        "poisson": lambda: poisson_workload(rate=100.0 * load, duration=DURATION_S, seed=seed),
        "bursty": lambda: bursty(mean_rate=60.0 * load, duration=DURATION_S, seed=seed),
        "drift": lambda: drift(mean_rate=60.0 * load, duration=DURATION_S, seed=seed),
    }
    # The trace is an hour: compressed further it would be over before a pod started.
    files = {"azure-conv 16x": (AZURE, 16.0)}
    for name, make in made.items():
        made_at = make()
        rate = len(made_at) / DURATION_S
        path = _write_trace(folder / f"{name}-{load:g}.csv", made_at)
        files[f"{name} {rate:.0f}/s"] = (path, 1.0)
    return files


def _times(folder: Path, factor: float) -> Path:
    batch, item = (v * factor for v in STATED_MS)
    path = folder / f"times-{factor:g}.yaml"
    path.write_text(
        f"kind: ServiceTimes\ntimePerBatch: {batch:g}ms\ntimePerItem: {item:g}ms\ncoldStart: 45s\n"
    )
    return path


def _cell(args: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = gpuserve(["simulate", *args])
    text = out.getvalue()
    attained = re.search(r"attainment ([\d.]+)%", text)
    hours = re.search(r"GPU-hours ([\d.]+)", text)
    if code != 0 or attained is None or hours is None:
        raise SystemExit(f"gpuserve simulate {' '.join(args)} failed:\n{text}")
    return f"{float(attained.group(1)):.2f} % on {float(hours.group(1)):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--factors",
        nargs="+",
        type=positive_number,
        default=[0.5, 2.0, 3.0, 4.0, 8.0],
        help="real / stated service times of the models replayed (default: %(default)s)",
    )
    parser.add_argument("--seed", type=positive_int, default=1, help="seed (default: %(default)s)")
    args = parser.parse_args()
    started = time.perf_counter()
    print("| service | real / stated | workload | " + " | ".join(c for c, _ in COLUMNS) + " |")
    print("|---" * (3 + len(COLUMNS)) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for service, (spec, load) in _services(folder).items():
            workloads = _workloads(folder, args.seed, load)
            for factor in args.factors:
                times = _times(folder, factor)
                for workload, (trace, compress) in workloads.items():
                    base = ["-f", str(spec), "--classes", str(CLASSES), "--times", str(times)]
                    base += ["--trace", str(trace), "--compress", f"{compress:g}"]
                    base += ["--seed", str(args.seed)]
                    cells = [_cell([*base, *extra]) for _, extra in COLUMNS]
                    print(f"| {service} | {factor:g}x | {workload} | " + " | ".join(cells) + " |")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
