"""`gpuserve simulate`: replay a trace against an InferenceService in the simulator.

    gpuserve simulate -f service.yaml --trace FILE [--compress X] [--plot out.png]
                      [--policy gpuserve|hpa|kpa|keda|static|oracle]
                      [--compare-classes]  (LLM services)

An LLM service (model.format vllm or tensorrtllm, with slo.ttft/slo.tpot) is replayed
token by token instead (cli/simulate_llm.py): an Azure conversation CSV or a Mooncake
JSON-lines trace, --policy gpuserve|keda-waiting|hpa-kv|planner-like|static-peak|oracle,
--routing random|prefix|least_loaded; --compare-classes runs it on each class the service
names alone and prints one table with the cheapest class that meets the objectives.

The service is parsed with gpuserve.api; AcceleratorClasses may sit in the same file (or
in --classes files); service times come from a `kind: ServiceTimes` document (see
gpuserve.sim.from_spec) or, without one, from the model's own parameters. The policy is
the operator's (gpuserve.autoscaling), called the way the operator's controller calls it.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cli.errors import SimulateError
from cli.keda_line import keda_line
from cli.plot_paths import plot_target
from cli.rendering import load_documents, split_manifests
from cli.simulate_llm import LLM_ONLY, run_llm
from cli.trace_files import quiet_note, trace_lines
from gpuserve.api.models import AcceleratorClassSpec, InferenceService, InferenceServiceSpec
from gpuserve.autoscaling.capacity import replica_capacity
from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.autoscaling.from_spec import (
    TIME_PARAMS,
    policy_config_from_spec,
    stated_service_times,
)
from gpuserve.autoscaling.keda_calibration import describe
from gpuserve.autoscaling.limits import limited_line
from gpuserve.autoscaling.outruns import tallest_outrun_line
from gpuserve.autoscaling.query_windows import DEFAULT_SCRAPE_INTERVAL_S
from gpuserve.resources.keda import KedaScaling, keda_scaling
from gpuserve.sim.comparing import Setup, add_replay_arguments
from gpuserve.sim.config import SimConfig
from gpuserve.sim.from_spec import (
    ServiceTimeModel,
    parse_service_time_model,
    placement_order,
    profile_from_spec,
    require_classes,
    sim_config_from_spec,
)
from gpuserve.sim.keda_engine import RENDERED_KEDA, RenderedKeda
from gpuserve.sim.lineup import (
    POLICIES,
    REFERENCE_CLASS,
    PolicyName,
    calibrate,
    make_scaler,
    sim_config_for,
)
from gpuserve.sim.llm.from_spec import is_llm
from gpuserve.sim.oracle import OraclePlan, plan_oracle
from gpuserve.sim.results import SimResult
from gpuserve.sim.scalers import GpuserveScaler, Scaler
from gpuserve.sim.simulating import simulate
from gpuserve.sim.workload import Workload, parse_trace, workload_from_trace

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "simulate",
        help="predict replicas, SLO attainment and GPU cost of a service on a trace",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-f",
        "--filename",
        required=True,
        type=Path,
        help="InferenceService YAML (may also hold AcceleratorClass and ServiceTimes documents)",
    )
    p.add_argument(
        "--classes",
        type=Path,
        action="extend",
        nargs="+",
        default=[],
        metavar="FILE",
        help="file(s) with the AcceleratorClass documents the service names (repeatable; "
        "the examples' are in examples/accelerator-classes.yaml)",
    )
    p.add_argument("--times", type=Path, help="a file with a `kind: ServiceTimes` document")
    p.add_argument(
        "--trace",
        required=True,
        type=Path,
        help="Azure LLM trace CSV (a header naming TIMESTAMP, ContextTokens and "
        "GeneratedTokens, in any order) or Mooncake JSON lines, told apart by the first line",
    )
    add_replay_arguments(p, compress=1.0)
    p.add_argument(
        "--policy",
        choices=(*POLICIES, RENDERED_KEDA, *LLM_ONLY),
        default=None,
        help="the scaling policy replayed: the service's own engine by default (gpuserve's "
        f"policy, or under scaling.engine keda the ScaledObject it renders: {RENDERED_KEDA}), "
        "a peer's model, static at the trace's peak, or the oracle",
    )
    p.add_argument(
        "--no-keda-calibration",
        action="store_true",
        help=f"with {RENDERED_KEDA}: keep the thresholds as first rendered from the spec "
        "(its service times; an LLM service's stated token mix), as if the operator never "
        "measured the model (status.kedaCalibration, status.kedaTokenMix): what the "
        "measurement changes",
    )
    p.add_argument(
        "--routing",
        choices=("random", "prefix", "least_loaded"),
        default="random",
        help="LLM services: a Service's random spreading, prefix-cache affinity, or the "
        "replica with the fewest running and waiting (an endpoint picker routing by load)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        help="write a PNG of load, replicas and p95 vs SLO (with --compare-classes: one per "
        "class, the class's name added to the file name)",
    )
    p.add_argument(
        "--compare-classes",
        action="store_true",
        help="LLM services: simulate each class the service names alone, and name the "
        "cheapest that meets the objectives",
    )
    # Unset unless given, so that the LLM path, which has no use for them, can refuse them.
    p.set_defaults(warmup=None, tokens_per_item=None)
    p.add_argument("--name", help="which InferenceService, if the file holds several")
    p.add_argument(
        "--seed", type=int, default=1, help="seed of the simulated service times and routing"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    docs = load_documents([args.filename, *args.classes])
    if args.times:
        docs += load_documents([args.times])
    services, classes = split_manifests(docs)
    service = _chosen(services, args.name, args.filename, docs)
    try:
        require_classes(service.spec, classes)
    except ValueError as exc:
        raise SimulateError(
            f"InferenceService {service.metadata.name}: {exc}: put them in the -f file, or "
            "pass the file that holds them with --classes FILE"
        ) from exc
    if args.policy is None:  # the service's own engine
        args.policy = RENDERED_KEDA if service.spec.scaling.engine == "keda" else "gpuserve"
    for line in _engine_note(service, args.policy):
        print(line)
    if args.plot:
        args.plot = plot_target(args.plot)
    if is_llm(service.spec):
        return run_llm(args, service, classes)
    if args.warmup is None:
        args.warmup = Setup().warmup
    if args.tokens_per_item is None:
        args.tokens_per_item = 0
    if args.routing != "random":
        raise SimulateError(
            f"--routing {args.routing}: LLM services only; "
            f"{service.metadata.name} is {service.spec.model.format}"
        )
    if args.compare_classes:
        raise SimulateError(
            f"--compare-classes: LLM services only; {service.metadata.name} is "
            f"{service.spec.model.format}"
        )
    if args.policy in LLM_ONLY:
        raise SimulateError(
            f"--policy {args.policy}: a policy for LLM services; "
            f"{service.metadata.name} is {service.spec.model.format} "
            f"(one of {', '.join((*POLICIES, RENDERED_KEDA))})"
        )
    times = _times(docs)
    spec = service.spec
    stated = _stated_times(service) if times is None else []
    for name in sorted(set(times.classes if times else {}) - set(spec.accelerators.classes)):
        # One times file may serve several services; a name none of them uses is a typo.
        print(
            f"note: ServiceTimes classes.{name}: {service.metadata.name} names no such "
            "class; its times are not used"
        )
    try:
        config = sim_config_from_spec(spec=spec, classes=classes, times=times, seed=args.seed)
    except ValueError as exc:
        raise SimulateError(f"InferenceService {service.metadata.name}: {exc}") from exc
    policy = policy_config_from_spec(spec, classes)
    if times is not None:
        policy = replace(
            policy,
            profile=profile_from_spec(spec, times),
            cold_start=times.cold_start,
            warm_start=times.warm_start,
        )
    policy = replace(policy, rate_window=config.rate_window)
    keda = _rendered_keda(spec, classes) if args.policy == RENDERED_KEDA else None
    if keda is not None:
        keda = replace(keda, measured=not args.no_keda_calibration)
    elif args.no_keda_calibration:
        raise SimulateError(f"--no-keda-calibration goes with --policy {RENDERED_KEDA}")
    try:
        rows = parse_trace(trace_lines(args.trace))
    except OSError as exc:
        raise SimulateError(f"{args.trace}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise SimulateError(f"{args.trace}: {exc}") from exc
    if not rows:
        raise SimulateError(f"{args.trace}: no requests")
    if note := quiet_note([r.at for r in rows]):
        print(note)
    workload = workload_from_trace(
        rows,
        compress=args.compress,
        tokens_per_item=args.tokens_per_item,
        max_items=max(1, spec.batching.max_batch_size),
    )
    first_minute = workload.rate_between(0.0, 60.0 / args.compress)
    workload = workload.with_warmup(seconds=args.warmup, rate=first_minute, seed=args.seed)
    # Start every policy in steady state for the warm-up load.
    steady = math.ceil(first_minute / max(_capacity(policy, config), 1e-9))
    config = replace(
        config,
        measure_from=args.warmup,
        initial_replicas=max(1, policy.min_replicas, min(policy.max_replicas, steady)),
    )
    started = time.perf_counter()
    result, conditions = _run(
        cast(PolicyName, args.policy), config=config, policy=policy, workload=workload, keda=keda
    )
    elapsed = time.perf_counter() - started
    _, skipped = placement_order(spec, classes)
    print(_inputs(config, times, stated, [issue.message for issue in skipped]))
    if keda is not None:
        print(keda_line(keda.numbers, min_replicas=keda.policy.min_replicas, llm=False))
    print(_report(service.metadata.name, args, result, policy, elapsed))
    for line in conditions:
        print(line)
    if args.plot:
        title = (
            f"{service.metadata.name} ({result.policy}): {args.trace.name} at "
            f"{args.compress:g}x, {result.attainment():.2%} within "
            f"{result.slo_latency * 1000:.0f}ms"
        )
        try:
            _plot(result, args.plot, title=title)
        except OSError as exc:
            raise SimulateError(f"--plot {args.plot}: {exc.strerror or exc}") from exc
        print(f"plot: {args.plot}")
    return 0


def _chosen(
    services: list[InferenceService],
    name: str | None,
    where: Path,
    docs: list[tuple[str, dict[str, Any]]],
) -> InferenceService:
    """The service to simulate: the one named, or the only one given."""
    if name:
        services = [s for s in services if s.metadata.name == name]
    if not services:
        # A misspelt kind is the likeliest cause: say which kinds were read.
        kinds = sorted({str(doc.get("kind")) for _, doc in docs})
        found = f" (kinds read: {', '.join(kinds)})" if kinds else " (no YAML documents)"
        raise SimulateError(
            f"{where}: no InferenceService{' ' + name if name else ''} found{found}"
        )
    if len(services) > 1:
        names = ", ".join(s.metadata.name for s in services)
        raise SimulateError(
            f"{where}: {len(services)} InferenceServices ({names}): choose one with --name"
        )
    return services[0]


def _engine_note(service: InferenceService, policy: str) -> list[str]:
    """Under scaling.engine keda the operator leaves the replica count to KEDA and writes
    none of its autoscaler's conditions: a replay of its own policy, asked for, is what
    the builtin engine would do, and must say so."""
    if service.spec.scaling.engine != "keda" or policy != "gpuserve":
        return []
    return [
        f"note: {service.metadata.name} sets scaling.engine keda: this replays the builtin "
        "engine's policy (what it would do if switched back), and the operator writes none "
        f"of its conditions under KEDA; --policy {RENDERED_KEDA} replays the ScaledObject "
        "gpuserve renders for it"
    ]


def _stated_times(service: InferenceService) -> list[str]:
    """The model parameters that state service times (``exec_time_ms``, ``per_item_ms``);
    an error naming one that is not a number (the operator takes the default there and
    corrects it from Triton's measurements; a prediction has no measurement)."""
    try:
        return stated_service_times(service.spec.model.parameters)
    except ValueError as exc:
        raise SimulateError(f"InferenceService {service.metadata.name}: {exc}") from exc


def _inputs(
    config: SimConfig, times: ServiceTimeModel | None, stated: list[str], skipped: list[str]
) -> str:
    """Which service times and classes the prediction rests on: a user must see when the
    model's own parameters, or built-in defaults, stood in for measurements."""
    svc = config.service
    if times is not None:
        source = "ServiceTimes document"
    elif len(stated) == len(TIME_PARAMS):
        source = f"the model's parameters {', '.join(TIME_PARAMS)}"
    else:
        given = f"the model's {stated[0]}, " if stated else ""
        source = (
            f"{given}built-in defaults for the rest: no measurement of this model; "
            "give a ServiceTimes document (--times) for a prediction of its own"
        )
    lines = [
        f"service times ({source}): {svc.per_batch * 1000:g}ms per execution + "
        f"{svc.per_item * 1000:g}ms per item at the measured precision, x"
        f"{svc.precision_factor:g} for the service's precision, "
        f"{svc.per_request * 1000:g}ms per request, jitter CV {svc.jitter_cv:g}"
    ]
    for pool in config.classes:
        own = (
            f", measured {pool.per_batch * 1000:g}ms + {pool.per_item * 1000:g}ms/item"
            if pool.per_batch is not None and pool.per_item is not None
            else ""
        )
        lines.append(
            f"class {pool.name}: speed {pool.speed:g}, {pool.cost_per_hour:g}/h per pod, "
            f"cold start {pool.cold_start:g}s, warm promotion {pool.warm_start:g}s{own}"
        )
    lines.extend(f"placement skips: {why}" for why in skipped)
    return "\n".join(lines)


def _capacity(policy: PolicyConfig, config: SimConfig) -> float:
    return replica_capacity(
        profile=policy.profile,
        slo_latency=policy.slo_latency,
        quantile=policy.plan_quantile,
        speed=config.classes[0].speed,
    ).rate


def _times(docs: list[tuple[str, dict[str, Any]]]) -> ServiceTimeModel | None:
    for where, doc in docs:
        if doc.get("kind") == "ServiceTimes":
            try:
                return parse_service_time_model(doc)
            except (ValueError, TypeError) as exc:
                raise SimulateError(f"{where} (ServiceTimes): {exc}") from exc
    return None


@dataclass(frozen=True, slots=True)
class _Rendered:
    """What the operator renders a KEDA service's ScaledObject from, and its numbers."""

    policy: PolicyConfig  # the spec's own, not the prediction's service times
    accel: AcceleratorClassSpec  # the class KEDA sizes: the preferred usable one
    numbers: KedaScaling
    measured: bool = True  # sized again from the measured compute time, as the operator does


def _rendered_keda(
    spec: InferenceServiceSpec, classes: dict[str, AcceleratorClassSpec]
) -> _Rendered:
    """The ScaledObject as the operator renders it for ``spec``, behind the chart's default
    scrape interval (the trigger's rate window follows it)."""
    order, _ = placement_order(spec, classes)
    policy, accel = policy_config_from_spec(spec), classes[order[0]]
    return _Rendered(policy, accel, keda_scaling(policy, accel, DEFAULT_SCRAPE_INTERVAL_S))


def _run(
    name: PolicyName,
    *,
    config: SimConfig,
    policy: PolicyConfig,
    workload: Workload,
    keda: _Rendered | None = None,
) -> tuple[SimResult, list[str]]:
    plan: OraclePlan | None = None
    calibration = None
    if name in ("oracle", "static"):
        plan = plan_oracle(config=config, workload=workload, max_replicas=policy.max_replicas)
    if name in ("hpa", "kpa", "keda"):
        calibration = calibrate(config=config)
    scaler = make_scaler(
        name,
        policy=keda.policy if keda else policy,
        calibration=calibration,
        plan=plan,
        accel=keda.accel if keda else REFERENCE_CLASS,
        scrape_interval=DEFAULT_SCRAPE_INTERVAL_S if keda else config.scrape_interval,
        keda_calibration=keda.measured if keda else True,
    )
    if isinstance(scaler, GpuserveScaler):
        scaler.keep_decisions = True  # for the conditions' lines of the report
    start = plan.replicas[0] if plan else config.initial_replicas
    cfg = replace(sim_config_for(name, config, config.warm_pool), initial_replicas=start)
    result = simulate(config=cfg, workload=workload, scaler=scaler)
    return result, _condition_lines(scaler, policy, config.measure_from)


def _condition_lines(scaler: Scaler, policy: PolicyConfig, since: float) -> list[str]:
    """What the BurstsCovered and ScalingLimited conditions would have said over the
    measured part (gpuserve's policy), or status.kedaCalibration (its KEDA rendering)."""
    if isinstance(scaler, RenderedKeda):
        return _calibration_lines(scaler)
    if not isinstance(scaler, GpuserveScaler):
        return []
    measured = [d for t, d in scaler.decisions if t >= since]
    covered = tallest_outrun_line(
        (d.outran for d in measured),
        min_replicas=policy.min_replicas,
        max_replicas=policy.max_replicas,
    )
    limited = limited_line(
        (d.signals for d in measured if d.mode != "hold"), max_replicas=policy.max_replicas
    )
    return [line for line in (covered, limited) if line is not None]


def _calibration_lines(scaler: RenderedKeda) -> list[str]:
    if not scaler.calibrate:
        return ["status.kedaCalibration: not replayed (--no-keda-calibration)"]
    if not scaler.calibrations:
        return ["status.kedaCalibration: no execution measured; the threshold stays as rendered"]
    at, last = scaler.calibrations[-1]
    times = len(scaler.calibrations)
    return [
        f"status.kedaCalibration: recorded {times} time{'s' if times > 1 else ''}, last at "
        f"{at:.0f}s: {describe(last, scaler.policy.profile)}; threshold then "
        f"{scaler.scaling.rate_threshold} req/s per replica"
    ]


def _report(
    name: str, args: argparse.Namespace, r: SimResult, policy: PolicyConfig, elapsed: float
) -> str:
    slo_ms = r.slo_latency * 1000
    lines = [
        f"{name}: policy {r.policy}, trace {args.trace.name} at {args.compress:g}x "
        f"({len(r.arrivals)} requests over {r.duration:.0f}s, simulated in {elapsed:.1f}s)",
        f"replicas (pods holding a GPU, per {_bucket(r):.0f}s): {_replicas_line(r)}",
        f"SLO p{r.slo_quantile * 100:.0f} <= {slo_ms:.0f}ms: attainment {r.attainment():.2%} "
        f"of requests within {slo_ms:.0f}ms ({r.misses()} over); "
        f"p50 {r.percentile(50) * 1000:.0f}ms p95 {r.percentile(95) * 1000:.0f}ms "
        f"p99 {r.percentile(99) * 1000:.0f}ms; "
        f"rejected {r.rejected}",
        f"GPU-hours {r.gpu_hours:.3f} (warm pods included), cost {r.cost:.2f}, "
        f"scale events {r.scale_events}, bounds {policy.min_replicas}-{policy.max_replicas}",
    ]
    return "\n".join(lines)


def _bucket(r: SimResult) -> float:
    return max(r.duration / 24.0, 1.0)


def _replicas_line(r: SimResult) -> str:
    size = _bucket(r)
    counts: dict[int, list[int]] = {}
    for point in r.timeline:
        counts.setdefault(int(point.at // size), []).append(point.pods)
    return " ".join(str(round(sum(v) / len(v))) for _, v in sorted(counts.items()))


def _plot(r: SimResult, out: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    times = [p.at for p in r.timeline]
    fig, (load, pods, lat) = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    load.plot(times, [p.demand for p in r.timeline], color="tab:blue", lw=1)
    load.set_ylabel("arrivals (req/s)")
    # The wide pale line under the thin one: where no pod starts or drains they coincide,
    # and both must still show.
    pods.step(
        times,
        [p.pods - p.warm for p in r.timeline],
        where="post",
        lw=4,
        alpha=0.4,
        color="tab:orange",
        label="serving + starting + draining",
    )
    pods.step(
        times,
        [p.serving_ready for p in r.timeline],
        where="post",
        color="tab:blue",
        label="serving",
    )
    pods.step(
        times, [p.warm for p in r.timeline], where="post", color="tab:green", label="warm pool"
    )
    pods.set_ylabel("pods (GPUs)")
    # From zero to a pod above the most: a constant count otherwise gets an axis a tenth
    # of a pod high, which the integer locator can only tick in fractions.
    pods.set_ylim(0, max((p.pods for p in r.timeline), default=0) + 1)
    pods.yaxis.set_major_locator(MaxNLocator(integer=True))
    pods.legend(loc="upper left")
    window = max(10.0, r.duration / 60)
    ceiling = r.slo_latency * 5
    mids: list[float] = []
    p95s: list[float] = []
    clipped: list[tuple[float, float]] = []
    t = 0.0
    while t < r.duration:
        chunk = sorted(
            lat for a, lat in zip(r.arrivals, r.latencies, strict=True) if t <= a < t + window
        )
        mids.append(t + window / 2)
        if not chunk:  # no request arrived: a gap, not a zero
            p95s.append(math.nan)
        else:
            q = chunk[int(0.95 * (len(chunk) - 1))]
            p95s.append(min(q, ceiling) * 1000)
            if q > ceiling:
                clipped.append((t + window / 2, ceiling * 1000))
        t += window
    lat.plot(mids, p95s, color="tab:red", lw=1, label=f"p95 per {window:.0f}s")
    if clipped:
        xs, ys = zip(*clipped, strict=True)
        lat.scatter(xs, ys, marker="^", color="tab:red", label="p95 above the axis (clipped)")
    lat.axhline(r.slo_latency * 1000, color="black", ls="--", lw=1, label="SLO")
    lat.set_ylabel("latency (ms)")
    lat.set_xlabel("seconds")
    lat.legend(loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, out)


def _save(fig: Figure, out: Path) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(out, dpi=100)
    plt.close(fig)
