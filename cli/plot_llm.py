"""The plot of `gpuserve simulate` for an LLM service: request rate, replicas, and TTFT and
TPOT at the objectives' quantile per window against the objectives."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from gpuserve.sim.llm.cluster import ClusterRun, RequestOutcome
from gpuserve.sim.llm.from_spec import finished_at


def plot_llm(run: ClusterRun, out: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    outcomes = run.outcomes
    end = max(map(finished_at, outcomes))
    window = max(10.0, end / 60)
    starts = [k * window for k in range(math.ceil(end / window) or 1)]
    mids = [t + window / 2 for t in starts]
    fig, (load, pods, ttft, tpot) = plt.subplots(4, 1, figsize=(10, 10), sharex=True)
    arrivals = [o.arrival_s for o in outcomes]
    load.plot(mids, [_count(arrivals, t, window) / window for t in starts], lw=1)
    load.set_ylabel("requests/s")
    # The replica log holds each change; carried to the end so the last level shows.
    times = [t for t, _ in run.replicas] + [end]
    counts = [n for _, n in run.replicas] + [run.replicas[-1][1]]
    pods.step(times, counts, where="post", label="replicas (serving + starting)")
    pods.set_ylabel("replicas")
    pods.yaxis.set_major_locator(MaxNLocator(integer=True))
    pods.set_ylim(bottom=0)
    pods.legend(loc="upper left")
    q = run.objectives.quantile
    label = f"p{q * 100:g} per {window:.0f}s"
    for axis, objective, value, unit in (
        (ttft, run.objectives.ttft_s, lambda o: o.ttft_s, "TTFT"),
        (tpot, run.objectives.tpot_s, lambda o: o.tpot_s, "TPOT"),
    ):
        _latency(axis, outcomes, starts, window, q, objective, value, f"{unit} {label}")
    tpot.set_xlabel("seconds")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def _count(arrivals: list[float], start: float, window: float) -> int:
    return sum(1 for a in arrivals if start <= a < start + window)


def _latency(
    axis: object,
    outcomes: tuple[RequestOutcome, ...],
    starts: list[float],
    window: float,
    q: float,
    objective: float,
    value: Callable[[RequestOutcome], float],
    label: str,
) -> None:
    """One latency panel in ms; values above 5x the objective are drawn at that ceiling
    (marked), and a window without requests is a gap, not a zero."""
    from matplotlib.axes import Axes

    assert isinstance(axis, Axes)
    unset = objective >= 1e8
    ceiling = math.inf if unset else objective * 5
    mids: list[float] = []
    points: list[float] = []
    clipped: list[tuple[float, float]] = []
    for start in starts:
        chunk = sorted(value(o) for o in outcomes if start <= o.arrival_s < start + window)
        mid = start + window / 2
        mids.append(mid)
        if not chunk:
            points.append(math.nan)
            continue
        high = chunk[min(len(chunk) - 1, int(q * len(chunk)))]
        points.append(min(high, ceiling) * 1000)
        if high > ceiling:
            clipped.append((mid, ceiling * 1000))
    axis.plot(mids, points, color="tab:red", lw=1, label=label)
    if clipped:
        xs, ys = zip(*clipped, strict=True)
        axis.scatter(xs, ys, marker="^", color="tab:red", label="above the axis (clipped)")
    if not unset:
        axis.axhline(objective * 1000, color="black", ls="--", lw=1, label="objective")
    axis.set_ylabel(f"{label.split()[0]} (ms)")
    axis.set_ylim(bottom=0)
    axis.legend(loc="upper left")
