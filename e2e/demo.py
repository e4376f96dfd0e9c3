"""`make demo` (`python -m e2e.demo`): the whole product on this machine, under real load.

Part of the development harness, not of the installed product: it needs a checkout.

Brings up the local control plane with simulated GPU pools, a real Prometheus and the
local Triton runner (a real tritonserver per pod), starts the operator, applies the
AcceleratorClasses and the demo services, replays a time-compressed slice of the Azure
production trace against each service (as streamed token requests to the LLM service),
shows a live view, and ends with summary tables and a PNG plot. Ctrl-C at any point stops
everything the demo started.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.loadgen import LoadResult, StreamRecord, StreamReplay, StreamResult
from gpuserve.api.models import GROUP, VERSION
from gpuserve.resources.naming import SERVICES_PLURAL

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO / "traces" / "azure-llm-conv-2023.csv"
SERVICES_FILE = REPO / "examples" / "demo" / "services.yaml"
CLASSES_FILE = REPO / "examples" / "accelerator-classes.yaml"
NAMESPACE = "gpuserve-demo"


class DemoError(RuntimeError):
    """A step of the demo failed; the message says which and what to do."""


# Each service gets the trace at its own compression: together ~200 req/s. At ~300 req/s
# the first minute's queue on one chat replica (before its scale-up) broke the objective.
# The LLM service gets the trace at its own pace (3-7 streams/s after the ramp).
COMPRESSION = {"chat": 20.0, "embed": 10.0, "nightly": 6.0, "llm": 1.0}
RAMP_S = 20.0  # the load rises over this many seconds
LLM_FORMATS = frozenset({"vllm", "tensorrtllm"})
# Each streamed token is one response round trip between the emulator's stub and the
# server, and every one costs CPU on this machine: outputs are capped so that the emulator
# keeps the engine model's timing beside the other services. Prompts cost no CPU, only
# emulated prefill time; the cap keeps the longest within the TTFT objective, and 2000
# is the top of a bucket of vLLM's prompt histogram (1-2-5), so the p95 prompt the
# operator reads from it stays within the cap instead of being interpolated up to 5000.
LLM_MAX_PROMPT_TOKENS = 2000
LLM_MAX_OUTPUT_TOKENS = 32
LIVE_WINDOW_S = 15.0  # the live view's client figures cover streams ended this recently


def step(message: str, started: float) -> None:
    print(f"==> [{time.monotonic() - started:6.1f}s] {message}", flush=True)


@dataclass
class Sample:
    t: float
    serving: int
    warm: int
    desired: int
    rate: float | None
    p95_ms: float | None
    queue: float | None
    reason: str
    decided: int | None = None  # the replica count the last decision asked for


@dataclass
class Series:
    slo_ms: float
    samples: list[Sample] = field(default_factory=list)
    ttft_ms: float | None = None  # the token objectives of an LLM service
    tpot_ms: float | None = None

    @property
    def is_llm(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None


def _cluster_cli(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "e2e.cluster", command],
        cwd=REPO,
        text=True,
        capture_output=command == "status",
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def local_cluster(started: float, keep: bool) -> Iterator[Path]:
    """Build (cached) and start the control plane; stop it at the end unless ``keep``."""
    from e2e.cluster import lifecycle, settings

    state = settings.layout()
    was_up = lifecycle.is_up(state)
    step("building or reusing the pinned control-plane binaries", started)
    if _cluster_cli("build", 3600).returncode != 0:
        raise DemoError("building the control plane failed (see the output above)")
    if was_up:
        step("reusing the local cluster that is already up", started)
    else:
        step("starting etcd, kube-apiserver, controller-manager, scheduler and KWOK", started)
        if _cluster_cli("up", 300).returncode != 0:
            raise DemoError("the local cluster did not start (see the output above)")
    interrupted = False
    try:
        yield state.admin_kubeconfig
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        if not was_up and (interrupted or not keep):
            step("stopping the local cluster", started)
            _cluster_cli("down", 180)


def _kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise DemoError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def _services() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(SERVICES_FILE.read_text()) if d]


def _slo_ms(doc: dict[str, Any], key: str = "latency") -> float | None:
    from gpuserve.api.durations import parse_duration

    value = doc["spec"]["slo"].get(key)
    return None if value is None else parse_duration(value) * 1e3


def is_llm(doc: dict[str, Any]) -> bool:
    return doc["spec"]["model"].get("format") in LLM_FORMATS


def series_for(doc: dict[str, Any]) -> Series:
    """The objectives a service's figures are shown against."""
    return Series(
        slo_ms=_slo_ms(doc) or 0.0, ttft_ms=_slo_ms(doc, "ttft"), tpot_ms=_slo_ms(doc, "tpot")
    )


class Watcher:
    """Samples status and Prometheus every ``period`` seconds for the live view and plot."""

    def __init__(
        self,
        kubeconfig: Path,
        prometheus_url: str,
        services: list[dict[str, Any]],
        period: float = 2.0,
        scrape_interval_s: float = 1.0,
    ) -> None:
        from kubernetes import client, config

        from controllers.prometheus_source import PrometheusSource
        from gpuserve.autoscaling.query_windows import QueryWindows

        self.api = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
        # The operator's own windows for this Prometheus: the view shows what it reads.
        windows = QueryWindows(scrape_interval_s)
        self.source = PrometheusSource(prometheus_url, windows=windows)
        self.series = {d["metadata"]["name"]: series_for(d) for d in services}
        self.streams: dict[str, StreamReplay] = {}  # the LLM services' load, read live
        self.period = period
        self.t0 = time.monotonic()
        self.load_started = 0.0  # seconds after t0 when the replay began
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-watch", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            with contextlib.suppress(Exception):  # a missed sample is not worth a crash
                self.sample()

    def sample(self) -> None:
        from gpuserve.autoscaling.metrics import MetricSample

        out = self.api.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, SERVICES_PLURAL)
        t = time.monotonic() - self.t0
        for obj in out.get("items", []):
            name = obj["metadata"]["name"]
            if name not in self.series:
                continue
            st = obj.get("status") or {}
            # An LLM service's figures are the client's (streams, TTFT, TPOT), read live
            # from its load; Triton's request metrics say little about a token stream.
            series = self.series[name]
            s = (
                MetricSample(at=t)
                if series.is_llm
                else self.source.read(namespace=NAMESPACE, service=name).sample
            )
            p95 = s.get("p95_latency")
            series.samples.append(
                Sample(
                    t=t,
                    serving=int(st.get("replicas", 0)),
                    warm=int(st.get("warmReplicas", 0)),
                    desired=int(st.get("desiredReplicas") or 0),
                    rate=s.get("success_rate"),
                    p95_ms=p95 * 1e3 if p95 is not None else None,
                    queue=s.get("queue_depth"),
                    reason=((st.get("lastDecision") or {}).get("reason") or "-"),
                    decided=(st.get("lastDecision") or {}).get("desiredReplicas"),
                )
            )

    def render(self, width: int = 0) -> str:
        """The live table; the last decision (its count first) is cut at a word boundary
        to fit ``width`` columns (the terminal's; 0: no limit)."""
        lines = [
            f"{'service':<8} {'serving':>7} {'warm':>4} {'want':>4} {'req/s':>7} "
            f"{'queue':>5} {'srv p95':>8} {'SLO':>7}  last decision"
        ]
        llm_lines = [
            f"{'service':<8} {'serving':>7} {'warm':>4} {'want':>4} {'str/s':>7} "
            f"{'TTFT p95':>8} {'SLO':>7} {'TPOT p95':>8} {'SLO':>6}  last decision"
        ]
        for name, series in self.series.items():
            if series.is_llm:
                llm_lines.append(self._llm_row(name, series, width))
            else:
                lines.append(self._row(name, series, width))
        if len(llm_lines) > 1:
            lines += ["", f"LLM (client-measured over the last {LIVE_WINDOW_S:.0f} s)", *llm_lines]
        return "\n".join(lines)

    @staticmethod
    def _row(name: str, series: Series, width: int) -> str:
        if not series.samples:
            return f"{name:<8} (waiting for status)"
        s = series.samples[-1]
        rate = f"{s.rate:7.1f}" if s.rate is not None else "      -"
        queue = f"{s.queue:5.0f}" if s.queue is not None else "    -"
        p95 = f"{s.p95_ms:6.0f}ms" if s.p95_ms is not None else "       -"
        row = (
            f"{name:<8} {s.serving:>7} {s.warm:>4} {s.desired:>4} {rate} {queue} "
            f"{p95} {series.slo_ms:5.0f}ms  "
        )
        return row + _decision(s, width - len(row) if width else 0)

    def _llm_row(self, name: str, series: Series, width: int) -> str:
        if not series.samples:
            return f"{name:<8} (waiting for status)"
        s = series.samples[-1]
        replay = self.streams.get(name)
        records = replay.records() if replay is not None else []
        now = time.monotonic() - replay.t0 if replay is not None else 0.0
        live = live_token_figures(records, now, LIVE_WINDOW_S)
        row = (
            f"{name:<8} {s.serving:>7} {s.warm:>4} {s.desired:>4} {_fmt(live.rate, 7, '.1f')} "
            f"{_fmt(live.ttft_p95_ms, 6, '.0f', 'ms')} {_fmt(series.ttft_ms, 5, '.0f', 'ms')} "
            f"{_fmt(live.tpot_p95_ms, 6, '.0f', 'ms')} {_fmt(series.tpot_ms, 4, '.0f', 'ms')}  "
        )
        return row + _decision(s, width - len(row) if width else 0)


def _fmt(value: float | None, width: int, spec: str, unit: str = "") -> str:
    """``value`` right-aligned in ``width`` columns (plus its unit), or a dash."""
    text = "-" if value is None else format(value, spec)
    return f"{text:>{width}}{unit if value is not None else ' ' * len(unit)}"


def _decision(sample: Sample, room: int) -> str:
    """The last decision, its count first, cut at a word boundary to ``room`` columns
    (0: no limit)."""
    decision = (
        f"-> {sample.decided}: {sample.reason}" if sample.decided is not None else sample.reason
    )
    return textwrap.shorten(decision, max(room, 20), placeholder=" ...") if room else decision


@dataclass(frozen=True)
class LiveTokens:
    """What an LLM service's clients felt lately."""

    rate: float | None  # streams ended per second
    ttft_p95_ms: float | None
    tpot_p95_ms: float | None
    failed: int


def live_token_figures(records: list[StreamRecord], now_s: float, window_s: float) -> LiveTokens:
    """Streams ended in the last ``window_s`` seconds (of the replay's clock ``now_s``):
    their rate, their p95 time to first token and time per output token, and failures."""
    from e2e.loadgen import percentile

    recent = [r for r in records if r.end_s is not None and now_s - window_s <= r.end_s]
    ok = [r for r in recent if r.ok]
    ttft = percentile([r.ttft_s for r in ok if r.ttft_s is not None], 95)
    tpot = percentile([r.tpot_s for r in ok if r.tpot_s is not None], 95)
    return LiveTokens(
        rate=len(ok) / window_s if recent else None,
        ttft_p95_ms=None if ttft is None else ttft * 1e3,
        tpot_p95_ms=None if tpot is None else tpot * 1e3,
        failed=len(recent) - len(ok),
    )


def ramped(arrivals: list[Any], ramp_s: float, seed: int = 0) -> list[Any]:
    """The arrivals of the first ``ramp_s`` seconds thinned from none to all (seeded): a
    replay that starts mid-trace otherwise opens with a step from 0 to the full rate, which
    no real service sees and no autoscaler can meet without idle headroom."""
    rng = random.Random(seed)
    return [a for a in arrivals if a.offset_s >= ramp_s or rng.random() < a.offset_s / ramp_s]


def _replay(
    trace: Path, target: Any, compress: float, duration: float, out: dict[str, Any], name: str
) -> None:
    from e2e.loadgen import Limits, read_trace, replay

    limits = Limits(max_requests=200_000, max_wall_s=duration + 60)
    arrivals = read_trace(trace, compress=compress, duration_s=duration)
    out[name] = replay(ramped(arrivals, RAMP_S), target, limits, mode="trace")


def llm_requests(trace: Path, compress: float, duration: float) -> list[Any]:
    """The trace's arrivals, ramped in like the other services', as streamed requests
    carrying their prompt and output token counts (capped)."""
    from e2e.loadgen import read_trace, token_requests

    arrivals = ramped(read_trace(trace, compress=compress, duration_s=duration), RAMP_S)
    return token_requests(
        arrivals,
        max_prompt_tokens=LLM_MAX_PROMPT_TOKENS,
        max_output_tokens=LLM_MAX_OUTPUT_TOKENS,
    )


def _start_streams(trace: Path, doc: dict[str, Any], plane: Any, duration: float) -> StreamReplay:
    from e2e.loadgen import Limits, Target

    name = doc["metadata"]["name"]
    target = Target(
        model=doc["spec"]["model"]["name"],
        endpoints=plane.runner.endpoints_for(NAMESPACE, name),
        request_timeout_s=60.0,
    )
    requests = llm_requests(trace, COMPRESSION.get(name, 1.0), duration)
    limits = Limits(max_requests=20_000, max_wall_s=duration + 60, max_in_flight=256)
    return StreamReplay(requests, target, limits).start()


def summary_rows(watcher: Watcher, results: dict[str, LoadResult]) -> list[list[str]]:
    rows = [
        [
            "service",
            "requests",
            "failed",
            "SLO",
            "attainment",
            "p95",
            "p99",
            "Triton p95",
            "max serving",
            "scale-ups",
            "scale-downs",
            "GPU-min",
        ]
    ]
    for name, series in watcher.series.items():
        if series.is_llm:
            continue
        res = results.get(name)
        samples = series.samples
        if res is None:
            rows.append([name, "-", "-", f"{series.slo_ms:.0f}ms", *["-"] * 8])
            continue
        within = 100.0 * (1 - res.fraction_slower_than(series.slo_ms)) if res.successes else 0.0
        rows.append(
            [
                name,
                str(res.sent),
                str(res.failures),
                f"{series.slo_ms:.0f}ms",
                f"{within:.1f}%",
                f"{res.p95_ms or 0:.0f}ms",
                f"{res.p99_ms or 0:.0f}ms",
                _server_p95(samples),
                *scaling_figures(samples),
            ]
        )
    return rows


def scaling_figures(samples: list[Sample]) -> list[str]:
    """Most pods serving, scale-ups, scale-downs (changes of the desired count) and
    GPU-minutes (serving and warm pods, one GPU each, over the samples)."""
    pairs = list(itertools.pairwise(samples))
    ups = sum(1 for a, b in pairs if b.desired > a.desired)
    downs = sum(1 for a, b in pairs if b.desired < a.desired)
    gpu_min = sum((b.t - a.t) * (a.serving + a.warm) for a, b in pairs) / 60
    return [
        str(max((s.serving for s in samples), default=0)),
        str(ups),
        str(downs),
        f"{gpu_min:.1f}",
    ]


def llm_summary_rows(
    series_of: dict[str, Series], results: dict[str, StreamResult]
) -> list[list[str]]:
    """One row per LLM service: streams, failures, client TTFT p95/p99 and TPOT p95
    against the objectives, the share of streams that met both (a failed one did not),
    and the scaling figures."""
    rows = [
        [
            "service",
            "streams",
            "failed",
            "TTFT SLO",
            "TTFT p95",
            "TTFT p99",
            "TPOT SLO",
            "TPOT p95",
            "both met",
            "max serving",
            "scale-ups",
            "scale-downs",
            "GPU-min",
        ]
    ]
    for name, series in series_of.items():
        res = results.get(name)
        if not series.is_llm or res is None:
            continue
        ttft_ms, tpot_ms = series.ttft_ms or math.inf, series.tpot_ms or math.inf
        rows.append(
            [
                name,
                str(res.sent),
                str(res.failures),
                _ms_text(series.ttft_ms),
                _ms_text(res.ttft_ms(95)),
                _ms_text(res.ttft_ms(99)),
                _ms_text(series.tpot_ms),
                _ms_text(res.tpot_ms(95)),
                f"{100.0 * res.attainment(ttft_ms / 1e3, tpot_ms / 1e3):.1f}%",
                *scaling_figures(series.samples),
            ]
        )
    return rows


def failure_lines(results: dict[str, StreamResult], most: int = 3) -> list[str]:
    """The most frequent reasons streams failed, per service: a count alone says nothing
    of where to look."""
    lines = []
    for name, result in results.items():
        for error, count in Counter(result.errors()).most_common(most):
            lines.append(f"{name}: {count} failed: {error}")
    return lines


def _ms_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}ms"


def _server_p95(samples: list[Sample]) -> str:
    """Triton's own p95 (queue + compute, per Prometheus), median over the samples that
    had one: next to the client's p95 it tells time in the server from time outside it
    (the load generator, the network, a saturated machine)."""
    values = sorted(s.p95_ms for s in samples if s.p95_ms is not None)
    return f"{values[len(values) // 2]:.0f}ms" if values else "-"


def binned_p95(
    points: list[tuple[float, float]], offset: float, bin_s: float = 5.0
) -> list[tuple[float, float]]:
    """(bin middle + ``offset``, p95 of the values) of (time, value) points in bins of
    ``bin_s`` seconds."""
    bins: dict[int, list[float]] = {}
    for t, value in points:
        bins.setdefault(int(t // bin_s), []).append(value)
    out = []
    for index in sorted(bins):
        values = sorted(bins[index])
        out.append((offset + (index + 0.5) * bin_s, values[int(0.95 * (len(values) - 1))]))
    return out


def client_p95_series(
    result: LoadResult, offset: float, bin_s: float = 5.0
) -> list[tuple[float, float]]:
    """(seconds after the watcher's start, p95 in ms) of the requests sent in each bin:
    what clients felt, unlike Triton's summary metric, which covers a sliding window."""
    points = [
        (r.send_s, r.latency_s * 1e3) for r in result.records if r.ok and r.latency_s is not None
    ]
    return binned_p95(points, offset, bin_s)


def token_p95_series(
    result: StreamResult, offset: float, bin_s: float = 5.0
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """TTFT and TPOT p95 in ms of the streams sent in each bin (seconds after the
    watcher's start)."""
    ok = [r for r in result.records if r.ok]
    ttft = [(r.send_s, r.ttft_s * 1e3) for r in ok if r.ttft_s is not None]
    tpot = [(r.send_s, r.tpot_s * 1e3) for r in ok if r.tpot_s is not None]
    return binned_p95(ttft, offset, bin_s), binned_p95(tpot, offset, bin_s)


def stream_rate_series(
    result: StreamResult, offset: float, bin_s: float = 5.0
) -> list[tuple[float, float]]:
    """Streams sent per second in each bin (seconds after the watcher's start)."""
    counts: dict[int, int] = {}
    for r in result.records:
        counts[int(r.send_s // bin_s)] = counts.get(int(r.send_s // bin_s), 0) + 1
    return [(offset + (i + 0.5) * bin_s, counts[i] / bin_s) for i in sorted(counts)]


def plot(
    watcher: Watcher,
    path: Path,
    results: dict[str, LoadResult] | None = None,
    streams: dict[str, StreamResult] | None = None,
) -> None:
    """One column per service: load, pods, and what clients felt against the objectives
    (latency p95; for an LLM service TTFT and TPOT p95) per 5 s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(watcher.series)
    fig, axes = plt.subplots(3, len(names), figsize=(5 * len(names), 8), sharex=True, squeeze=False)
    for col, name in enumerate(names):
        series = watcher.series[name]
        load, reps, lat = axes[0][col], axes[1][col], axes[2][col]
        load.set_title(name)
        _plot_pods(reps, series)
        if series.is_llm:
            stream = (streams or {}).get(name)
            replay = watcher.streams.get(name)
            offset = replay.t0 - watcher.t0 if replay is not None else watcher.load_started
            _plot_llm(load, lat, series, stream, offset)
        else:
            _plot_requests(load, lat, series, (results or {}).get(name), watcher.load_started)
        lat.set_xlabel("seconds")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_pods(ax: Any, series: Series) -> None:
    t = [s.t for s in series.samples]
    ax.step(t, [s.serving for s in series.samples], where="post", label="serving")
    ax.step(
        t,
        [s.serving + s.warm for s in series.samples],
        where="post",
        label="serving + warm",
        linestyle="--",
    )
    ax.step(t, [s.desired for s in series.samples], where="post", label="desired", linestyle=":")
    ax.set_ylabel("pods")
    ax.legend(loc="upper left", fontsize="small")


def _plot_requests(
    load: Any, lat: Any, series: Series, result: LoadResult | None, offset: float
) -> None:
    t = [s.t for s in series.samples]
    load.plot(t, [s.rate or 0 for s in series.samples], color="tab:blue")
    load.set_ylabel("completed req/s")
    if result is not None:
        felt = client_p95_series(result, offset)
        lat.plot(
            [x for x, _ in felt],
            [y for _, y in felt],
            color="tab:red",
            label="client p95 (5 s bins)",
        )
    lat.plot(
        t,
        [s.p95_ms if s.p95_ms is not None else float("nan") for s in series.samples],
        color="tab:gray",
        linewidth=0.8,
        label="Triton p95 (its summary metric)",
    )
    lat.axhline(series.slo_ms, color="black", linestyle="--", label="SLO")
    lat.set_ylabel("latency (ms)")
    lat.legend(loc="upper left", fontsize="small")


def _plot_llm(
    load: Any, lat: Any, series: Series, result: StreamResult | None, offset: float
) -> None:
    """Streams sent per second; TTFT and TPOT p95 per 5 s on a log scale (they differ by
    an order of magnitude), each with its objective in its colour."""
    load.set_ylabel("streams sent /s (5 s bins)")
    lat.set_ylabel("client p95 (ms, log)")
    lat.set_yscale("log")
    if result is not None:
        rate = stream_rate_series(result, offset)
        load.plot([x for x, _ in rate], [y for _, y in rate], color="tab:blue")
        load.set_ylim(bottom=0)
        ttft, tpot = token_p95_series(result, offset)
        lat.plot([x for x, _ in ttft], [y for _, y in ttft], color="tab:red", label="TTFT p95")
        lat.plot([x for x, _ in tpot], [y for _, y in tpot], color="tab:purple", label="TPOT p95")
    if series.ttft_ms is not None:
        lat.axhline(series.ttft_ms, color="tab:red", linestyle="--", label="TTFT SLO")
    if series.tpot_ms is not None:
        lat.axhline(series.tpot_ms, color="tab:purple", linestyle="--", label="TPOT SLO")
    lat.legend(loc="upper left", fontsize="small")


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def _live(watcher: Watcher, until: float, interactive: bool) -> None:
    while time.monotonic() < until:
        time.sleep(2.0)
        view = watcher.render(shutil.get_terminal_size((160, 40)).columns if interactive else 0)
        if interactive:
            print("\033[2J\033[H" + view, flush=True)
        else:
            print(view + "\n", flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from e2e.operatorkit import install_crds
    from e2e.runner.dataplane import LocalDataPlane

    # Ctrl-C and a polite kill both unwind through the cleanup below, even when the
    # demo was started with SIGINT ignored (as background jobs of a script are).
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    trace = Path(args.trace)
    if not trace.is_file():
        raise DemoError(f"trace file not found: {trace} (pass --trace)")
    services = _services()
    out_dir = Path(args.out)
    operator: subprocess.Popen[bytes] | None = None
    with local_cluster(started, keep=not args.down) as kubeconfig:
        from e2e.cluster.testkit import ClusterHandle

        handle = ClusterHandle(kubeconfig, started_here=False, local=True)
        step("installing the CRDs and the AcceleratorClasses", started)
        install_crds(handle)
        _kubectl(kubeconfig, "apply", "-f", str(CLASSES_FILE))
        step("starting Prometheus and the local Triton runner", started)
        with LocalDataPlane(kubeconfig) as plane:
            step("starting the operator", started)
            out_dir.mkdir(parents=True, exist_ok=True)
            env = dict(
                os.environ,
                **plane.operator_env,
                KUBECONFIG=str(kubeconfig),
                GPUSERVE_AUTOSCALE_INTERVAL="2",
                GPUSERVE_EXTRA_POD_LABELS="gpuserve.io/readiness=external",
            )
            with (out_dir / "operator.log").open("wb") as log:
                operator = subprocess.Popen(
                    [sys.executable, "-m", "controllers.entrypoint", "--liveness", ""],
                    cwd=REPO,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            try:
                step(f"applying {len(services)} services in namespace {NAMESPACE}", started)
                _kubectl(
                    kubeconfig,
                    "apply",
                    "-f",
                    "-",
                    stdin=yaml.safe_dump(
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
                    ),
                )
                # A cluster left up by an earlier demo still holds its services, scaled for
                # its load: start from what the manifests say, as a first run does.
                left = _kubectl(kubeconfig, "get", SERVICES_PLURAL, "-n", NAMESPACE, "-o", "name")
                if left.strip():
                    step("removing the services an earlier demo left", started)
                    _kubectl(kubeconfig, "delete", SERVICES_PLURAL, "--all", "-n", NAMESPACE)
                _kubectl(kubeconfig, "apply", "-n", NAMESPACE, "-f", str(SERVICES_FILE))
                _wait_ready(kubeconfig, services, started, timeout=180)
                watcher = Watcher(
                    kubeconfig,
                    plane.prometheus_url,
                    services,
                    scrape_interval_s=plane.scrape_interval_s,
                ).start()
                step(
                    f"replaying {args.duration:.0f}s of the trace "
                    f"({', '.join(f'{k} x{v:g}' for k, v in COMPRESSION.items())}; "
                    f"LLM streams of at most {LLM_MAX_PROMPT_TOKENS} prompt and "
                    f"{LLM_MAX_OUTPUT_TOKENS} output tokens), "
                    f"then {args.cooldown:.0f}s of quiet",
                    started,
                )
                results, streams = _drive(args, trace, plane, services, watcher)
                watcher.stop()
                tables = _table(summary_rows(watcher, results))
                if streams:
                    tables += "\n\n" + _table(llm_summary_rows(watcher.series, streams))
                    tables += "".join(f"\n{line}" for line in failure_lines(streams))
                print("\n" + tables)
                (out_dir / "summary.txt").write_text(tables + "\n")
                plot(watcher, out_dir / "demo.png", results, streams)
                step(f"plot: {out_dir / 'demo.png'}, summary: {out_dir / 'summary.txt'}", started)
            finally:
                if operator.poll() is None:
                    operator.terminate()
                    try:
                        operator.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        operator.kill()
                        operator.wait(timeout=10)
                step("stopping the operator, the Triton processes and Prometheus", started)
    if not args.down:
        print(
            f"\nThe cluster is still up. Try:\n  export KUBECONFIG={kubeconfig}\n"
            f"  kubectl get gsvc -n {NAMESPACE}\n  kubectl get pods -n {NAMESPACE} -o wide\n"
            "  make cluster-down   # when done"
        )
    return 0


def _wait_ready(
    kubeconfig: Path, services: list[dict[str, Any]], started: float, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    names = [d["metadata"]["name"] for d in services]
    for name in names:
        left = max(1, int(deadline - time.monotonic()))
        result = subprocess.run(
            [
                "kubectl",
                f"--kubeconfig={kubeconfig}",
                "wait",
                "-n",
                NAMESPACE,
                "--for=condition=Ready",
                f"inferenceservice/{name}",
                f"--timeout={left}s",
            ],
            capture_output=True,
            text=True,
            timeout=left + 10,
            check=False,
        )
        if result.returncode != 0:
            raise DemoError(f"service {name} did not become Ready: {result.stderr.strip()}")
    step(f"all {len(names)} services Ready (a real tritonserver behind every pod)", started)


def _drive(
    args: argparse.Namespace,
    trace: Path,
    plane: Any,
    services: list[dict[str, Any]],
    watcher: Watcher,
) -> tuple[dict[str, LoadResult], dict[str, StreamResult]]:
    """Replays the trace against every service (streams to the LLM ones) with the live
    view on, then the quiet; the results of each."""
    from e2e.loadgen import Target

    results: dict[str, LoadResult] = {}
    threads = []
    watcher.load_started = time.monotonic() - watcher.t0
    for doc in services:
        name = doc["metadata"]["name"]
        if is_llm(doc):
            watcher.streams[name] = _start_streams(trace, doc, plane, args.duration)
            continue
        target = Target(
            model=doc["spec"]["model"]["name"],
            endpoints=plane.runner.endpoints_for(NAMESPACE, name),
            connections_per_endpoint=2,
        )
        thread = threading.Thread(
            target=_replay,
            name=f"load-{name}",
            daemon=True,
            args=(trace, target, COMPRESSION.get(name, 10.0), args.duration, results, name),
        )
        threads.append(thread)
        thread.start()
    _live(watcher, time.monotonic() + args.duration, interactive=sys.stdout.isatty())
    for thread in threads:
        thread.join(timeout=90)
    # Every stream ends by its own timeout; this bounds the wait all the same.
    streams = {name: r.join(timeout_s=90) for name, r in watcher.streams.items()}
    _live(watcher, time.monotonic() + args.cooldown, interactive=sys.stdout.isatty())
    return results, streams


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="make demo", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--trace", default=str(DEFAULT_TRACE), help="Azure-format trace CSV")
    p.add_argument(
        "--duration",
        type=float,
        default=120.0,
        help="seconds of (compressed) trace to replay (default 120)",
    )
    p.add_argument(
        "--cooldown",
        type=float,
        default=75.0,
        help="quiet seconds after the load, to show scale-down (default 75)",
    )
    p.add_argument("--out", default="out/demo", help="where the plot and summary go")
    p.add_argument(
        "--down",
        action="store_true",
        help="tear the local cluster down at the end (default: leave it up)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except DemoError as exc:
        print(f"make demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("make demo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
