"""An LLM InferenceService in the token-level simulator: the operator's policy from the
spec, the engine of one of its classes, and one policy of the lineup run on a token trace
(what `gpuserve simulate` does for vLLM and TensorRT-LLM services).

By default the service is simulated on the first class its placement can use (its most
preferred one, unless that one is too small for the model or lacks a precision): the
class a service lands on while the cluster has room.
`--compare-classes` simulates each class it names alone, one after the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpuserve.api.llm_sizing import GIB, memory_shortfall
from gpuserve.api.models import LLM_FORMATS, AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.autoscaling.limits import limited_line
from gpuserve.autoscaling.outruns import tallest_outrun_line
from gpuserve.llm.capacity import replica_capacity
from gpuserve.llm.deciding import LLMPolicy, replicas_for
from gpuserve.llm.from_spec import llm_policy_from_spec
from gpuserve.llm.gpus import ACTIVATION_BYTES, datasheet_for
from gpuserve.llm.keda_mix import describe_mix
from gpuserve.llm.params import EngineParams
from gpuserve.placement.planning import usable_classes
from gpuserve.sim.from_spec import placement_order, require_classes
from gpuserve.sim.llm.cluster import (
    ClusterConfig,
    ClusterRun,
    RequestOutcome,
    Routing,
    simulate_cluster,
)
from gpuserve.sim.llm.keda_rendered import KedaReplay, RenderedKedaLLM
from gpuserve.sim.llm.lineup import LLMPolicyName, contender, trace_shape
from gpuserve.sim.llm.oracle import plan_oracle, sizes_alone
from gpuserve.sim.llm.scalers import GpuserveLLM, Static
from gpuserve.sim.llm.traces import TokenTrace


def is_llm(spec: InferenceServiceSpec) -> bool:
    return spec.model.format in LLM_FORMATS


@dataclass(frozen=True, slots=True)
class LLMSetup:
    """What a simulation of the service rests on."""

    policy: LLMPolicy  # the operator's, its ``params`` the simulated engine
    class_name: str
    accelerator: AcceleratorClassSpec
    gpus_per_pod: int
    engine_source: str  # where the engine parameters came from, for the user
    # Why the class has no engine of its own (the defaults stand in); None when it has.
    no_engine: str | None = None
    # Whether the model fits the class's GPUs: False where the engine's memory rule (or
    # placement's) refuses it; True where it fits or no datasheet tells.
    fits: bool = True
    # The classes placement skips, each with the reason (placement's words).
    skipped: tuple[str, ...] = ()
    # Why placement skips this class (a class named by --compare-classes); None if it does not.
    refused_by_placement: str | None = None

    @property
    def params(self) -> EngineParams:
        return self.policy.params

    @property
    def cost_per_gpu_hour(self) -> float:
        return self.accelerator.cost_per_hour


def llm_setup(
    spec: InferenceServiceSpec,
    classes: Mapping[str, AcceleratorClassSpec],
    class_name: str | None = None,
) -> LLMSetup:
    """The service on ``class_name`` (default: the class placement puts it on). Raises
    ValueError naming the field when the service cannot be simulated."""
    require_classes(spec, classes)
    if spec.llm is None:
        raise ValueError(f"llm: required for model.format {spec.model.format}")
    policy = llm_policy_from_spec(spec, classes=classes)
    if policy is None:
        raise ValueError(
            "slo.ttft, slo.tpot: an LLM service is simulated on its token objectives; "
            "set at least one"
        )
    # The class the operator places the service on while the cluster has room is the first
    # its placement can use; a class named (--compare-classes) is taken as named.
    if class_name is None:
        order, issues = placement_order(spec, classes)
        name = order[0]
    else:
        _, issues = usable_classes(spec, classes)
        name = class_name
    refused = {issue.class_name: issue.message for issue in issues}
    if name not in spec.accelerators.classes:
        raise ValueError(f"accelerators.classes: {name!r} is not one of the service's classes")
    accelerator = classes[name]
    missing = no_engine_reason(spec, policy, name, accelerator)
    params, source = class_engine(policy, name, accelerator, missing)
    # The scaler's capacity model then prices the engine the replicas run.
    return LLMSetup(
        replace(policy, params=params),
        name,
        accelerator,
        spec.accelerators.gpus_per_pod,
        source,
        missing,
        # Without a datasheet nothing tells whether the model fits.
        fits=missing is None or datasheet_for(accelerator.gpu_product) is None,
        skipped=tuple(refused.values()) if class_name is None else (),
        refused_by_placement=refused.get(name),
    )


def no_engine_reason(
    spec: InferenceServiceSpec,
    policy: LLMPolicy,
    class_name: str,
    accelerator: AcceleratorClassSpec,
) -> str | None:
    """Why ``policy`` has no engine of its own for the class (gpuserve.llm.gpus gave
    none); None when it has one."""
    if class_name in policy.by_class:
        return None
    sheet = datasheet_for(accelerator.gpu_product)
    if sheet is None:
        return f"no datasheet for {accelerator.gpu_product}"
    memory_gib = (
        accelerator.memory_gib
        if accelerator.memory_gib is not None
        else sheet.memory_gb * 1e9 / GIB
    )
    # Placement's own words where its check fails too; the engine's rule also sets aside
    # activations, so it can refuse a class placement would accept.
    shortfall = memory_shortfall(spec, memory_gib)
    if shortfall is not None:
        return f"does not fit: {shortfall}"
    return (
        f"does not fit: one {policy.params.max_model_len}-token sequence's KV cache, the "
        f"weights and {ACTIVATION_BYTES / 1e9:g} GB of activations exceed "
        f"kvCacheMemoryFraction of {memory_gib:.3g} GiB"
    )


def class_engine(
    policy: LLMPolicy, class_name: str, accelerator: AcceleratorClassSpec, missing: str | None
) -> tuple[EngineParams, str]:
    """The engine parameters simulated for ``class_name``, and where they came from: the
    policy's own for the class (the model's size over the GPU's datasheet,
    ``gpuserve.llm.gpus``) where it has them, else its defaults, saying why
    (``missing``, from ``no_engine_reason``)."""
    own = policy.by_class.get(class_name)
    if own is not None:
        return own, (
            f"derived for class {class_name} from the {accelerator.gpu_product} datasheet "
            "and the model's size (gpuserve/llm/gpus.py)"
        )
    return policy.params, (
        f"the defaults (Llama 3 8B bf16 on one H100, spec's bounds applied): class "
        f"{class_name} has none of its own ({missing})"
    )


def fit_to_trace(params: EngineParams, trace: TokenTrace) -> EngineParams:
    """The engine with the trace's prefix-hash granularity: a Mooncake trace hashes
    512-token blocks, so the cache is counted in blocks of that size (same tokens)."""
    if not trace.hashed or trace.block_size == params.block_size:
        return params
    blocks = max(1, params.capacity_tokens // trace.block_size)
    return replace(params, block_size=trace.block_size, num_blocks=blocks)


def within_context(trace: TokenTrace, max_model_len: int) -> tuple[TokenTrace, int]:
    """The requests the engine accepts, and how many it refuses: vLLM rejects a request
    whose prompt plus output exceeds the context length."""
    kept = tuple(r for r in trace.requests if r.prompt_tokens + r.output_tokens <= max_model_len)
    return replace(trace, requests=kept), len(trace.requests) - len(kept)


def finished_at(outcome: RequestOutcome) -> float:
    """When the request's last token came out."""
    return outcome.arrival_s + outcome.ttft_s + outcome.tpot_s * (outcome.output_tokens - 1)


def steady_replicas(policy: LLMPolicy, trace: TokenTrace) -> int:
    """Replicas the capacity model gives the first minute's rate, within the bounds: a
    service already running at its level, not one starting from nothing."""
    span = min(60.0, max(trace.duration, 1.0))
    rate = sum(1 for r in trace.requests if r.arrival_s < span) / span
    shape = trace_shape(trace, policy.objectives.quantile)
    per_replica = replica_capacity(policy.params, shape, policy.objectives).rate
    wanted = replicas_for(rate, per_replica) if per_replica > 0 else policy.max_replicas
    return max(1, policy.min_replicas, min(policy.max_replicas, wanted))


@dataclass(frozen=True, slots=True)
class PolicyRun:
    """One policy's run, and for gpuserve's rule what its ``BurstsCovered`` and
    ``ScalingLimited`` conditions would have said over it (``tallest_outrun_line``,
    ``limited_line``; None for the others)."""

    run: ClusterRun
    bursts_covered: str | None = None
    scaling_limited: str | None = None
    # gpuserve-keda: the last status.kedaTokenMix the operator would have recorded.
    keda_token_mix: str | None = None


def run_llm_policy(
    name: LLMPolicyName,
    policy: LLMPolicy,
    trace: TokenTrace,
    *,
    routing: Routing = "random",
    seed: int = 1,
    keda: KedaReplay | None = None,
) -> PolicyRun:
    """``name`` on ``trace`` with the service's engine, objectives and bounds (``keda``:
    the service's scaling fields and class, for ``gpuserve-keda``)."""
    config = ClusterConfig(
        policy.params,
        policy.objectives,
        startup_s=policy.startup_s,
        routing=routing,
        initial_replicas=steady_replicas(policy, trace),
        seed=seed,
    )
    if name not in ("oracle", "static-peak"):
        scaler = contender(name, policy, trace, peak=1, keda=keda)
        if isinstance(scaler, RenderedKedaLLM):
            run = simulate_cluster(config, trace, scaler)
            return PolicyRun(run, keda_token_mix=_mix_line(scaler))
        if not isinstance(scaler, GpuserveLLM):
            return PolicyRun(simulate_cluster(config, trace, scaler))
        scaler.keep_decisions = True
        run = simulate_cluster(config, trace, scaler)
        line = tallest_outrun_line(
            (d.outran for _, d in scaler.decisions),
            min_replicas=policy.min_replicas,
            max_replicas=policy.max_replicas,
        )
        limited = limited_line(
            (d.signals for _, d in scaler.decisions if d.mode != "hold"),
            max_replicas=policy.max_replicas,
        )
        return PolicyRun(run, line, limited)
    target, most = policy.objectives.quantile, policy.max_replicas
    if name == "oracle":
        return PolicyRun(plan_oracle(config, trace, target=target, most=most).run)
    # Static at peak needs only the windows sized alone, not the oracle's end-to-end checks.
    peak = max(sizes_alone(config, trace, target=target, most=most))
    return PolicyRun(simulate_cluster(replace(config, initial_replicas=peak), trace, Static(peak)))


def _mix_line(scaler: RenderedKedaLLM) -> str:
    """The last token mix the replay sized the thresholds for, as status would hold it."""
    if not scaler.replay.calibrate:
        return "status.kedaTokenMix: not replayed (--no-keda-calibration): as first rendered"
    if scaler.mix is None:
        return "status.kedaTokenMix: none recorded (no request measured)"
    at, last = scaler.mixes[-1]
    policy = scaler.policy
    said = describe_mix(last, policy, scaler.replay.class_name, policy.objectives.quantile)
    return f"status.kedaTokenMix (recorded {len(scaler.mixes)} time(s), last at {at:.0f}s): {said}"
