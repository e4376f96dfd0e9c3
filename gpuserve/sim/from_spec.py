"""Simulator configuration from an InferenceService, its AcceleratorClasses and a
service-time model.

The CRD does not say how long the model takes; the simulator needs it. The
:class:`ServiceTimeModel` gives time per execution and per item on the reference class,
at the precision it was measured at, with optional per-class measurements. Without one,
the model's own parameters are used as the policy reads them (``exec_time_ms`` /
``per_item_ms``, as the demo catalogue's sleeper states them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from gpuserve.api.durations import parse_duration
from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.autoscaling.config import ServiceProfile
from gpuserve.autoscaling.from_spec import service_profile
from gpuserve.placement.planning import ClassIssue, usable_classes
from gpuserve.sim.config import (
    AcceleratorPool,
    Balancing,
    BatcherConfig,
    ClassTimes,
    QueuePolicy,
    ServiceTimes,
    SimConfig,
)

# Throughput of each precision relative to fp32 on tensor-core GPUs: a rough prior used
# only to move a measurement from one precision to another.
PRECISION_SPEEDUP: dict[str, float] = {
    "fp32": 1.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "int8": 3.0,
    "fp8": 3.5,
}


@dataclass(frozen=True, slots=True)
class ServiceTimeModel:
    """Seconds per execution and per item on the reference class (relative speed 1.0),
    measured at ``precision``; ``classes`` holds measurements on named classes.
    ``per_request`` is the serving stack's host-side cost per request in an execution
    (not scaled by precision or speed); ``jitter_cv`` the spread of execution times."""

    per_batch: float
    per_item: float
    precision: str = "fp32"
    classes: Mapping[str, ClassTimes] = field(default_factory=dict)
    cold_start: float = 60.0
    warm_start: float = 2.0
    jitter_cv: float = 0.0
    per_request: float = 0.0

    def factor_for(self, precision: str) -> float:
        """Multiplier that moves these times to ``precision``."""
        return PRECISION_SPEEDUP.get(self.precision, 1.0) / PRECISION_SPEEDUP.get(precision, 1.0)


def _seconds(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"expected a duration of 0 or more, got {value!r}")
        return float(value)
    if isinstance(value, str):
        return parse_duration(value)
    raise ValueError(f"expected a duration such as 5ms, got {value!r}")


def _optional_seconds(value: object) -> float | None:
    return None if value is None else _seconds(value)


def _fraction(value: object) -> float:
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    ):
        return float(value)
    raise ValueError(f"expected a number >= 0, got {value!r}")


def _optional_fraction(value: object) -> float | None:
    return None if value is None else _fraction(value)


def _precision(value: object) -> str:
    precision = str(value)
    if precision not in PRECISION_SPEEDUP:
        raise ValueError(f"one of {', '.join(PRECISION_SPEEDUP)}, got {precision!r}")
    return precision


def _class_entries(value: object) -> object:
    """``classes:`` left empty or null means none; class names are read as text."""
    if not value:
        return {}
    if isinstance(value, Mapping):
        return {str(name): times for name, times in value.items()}
    return value


Seconds = Annotated[float, BeforeValidator(_seconds)]
OptionalSeconds = Annotated[float | None, BeforeValidator(_optional_seconds)]


class _ClassTimesDocument(BaseModel):
    """One entry of ``classes:``: times measured on that class."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per_batch: OptionalSeconds = Field(None, alias="timePerBatch")
    per_item: OptionalSeconds = Field(None, alias="timePerItem")
    per_request: OptionalSeconds = Field(None, alias="timePerRequest")
    jitter_cv: Annotated[float | None, BeforeValidator(_optional_fraction)] = Field(
        None, alias="jitter"
    )

    @model_validator(mode="after")
    def _batch_and_item_together(self) -> _ClassTimesDocument:
        if (self.per_batch is None) != (self.per_item is None):
            raise ValueError("give timePerBatch and timePerItem together")
        return self


class _ServiceTimesDocument(BaseModel):
    """The ``kind: ServiceTimes`` document; see :func:`parse_service_time_model`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["ServiceTimes"] = "ServiceTimes"
    per_batch: Seconds = Field(alias="timePerBatch")
    per_item: Seconds = Field(alias="timePerItem")
    per_request: Seconds = Field(0.0, alias="timePerRequest")
    jitter_cv: Annotated[float, BeforeValidator(_fraction)] = Field(0.0, alias="jitter")
    precision: Annotated[str, BeforeValidator(_precision)] = "fp32"
    cold_start: Seconds = Field(60.0, alias="coldStart")
    warm_start: Seconds = Field(2.0, alias="warmStart")
    classes: Annotated[dict[str, _ClassTimesDocument], BeforeValidator(_class_entries)] = {}


def _field_names(model: type[BaseModel]) -> str:
    return ", ".join(info.alias or name for name, info in model.model_fields.items())


def _describe(exc: ValidationError) -> str:
    """Each error as ``path: problem``, the path spelled as in the document."""
    problems = []
    for err in exc.errors():
        loc = err["loc"]
        where = ".".join(str(part) for part in loc) or "ServiceTimes"
        if err["type"] == "extra_forbidden":
            model = _ServiceTimesDocument if len(loc) == 1 else _ClassTimesDocument
            problem = f"unknown field (expected one of: {_field_names(model)})"
        elif err["type"] == "missing":
            problem = "missing"
        elif err["type"] == "value_error":
            problem = str(err["ctx"]["error"])
        elif err["type"] in ("model_type", "dict_type"):
            problem = f"expected a mapping, got {err['input']!r}"
        else:
            problem = err["msg"]
        problems.append(f"{where}: {problem}")
    return "; ".join(problems)


def parse_service_time_model(body: Mapping[str, Any]) -> ServiceTimeModel:
    """From YAML such as (examples/service-times.yaml is a complete one)::

    kind: ServiceTimes
    timePerBatch: 5ms
    timePerItem: 0.2ms
    timePerRequest: 0.1ms    # optional: serving stack's own cost per request per execution
    jitter: 0.05             # optional: coefficient of variation of execution times
    precision: fp32          # what the times were measured at
    coldStart: 45s
    warmStart: 2s
    classes:
      l4: {timePerBatch: 9ms, timePerItem: 0.5ms, jitter: 0.1}

    Durations are strings such as ``5ms`` or numbers of seconds. Only ``timePerBatch`` and
    ``timePerItem`` are required; an unknown key, at the top or in a class's entry, is an
    error (ValueError) naming its path and the keys allowed there.
    """
    try:
        doc = _ServiceTimesDocument.model_validate(dict(body))
    except ValidationError as exc:
        raise ValueError(_describe(exc)) from None
    return ServiceTimeModel(
        per_batch=doc.per_batch,
        per_item=doc.per_item,
        precision=doc.precision,
        classes={
            name: ClassTimes(
                per_batch=times.per_batch,
                per_item=times.per_item,
                per_request=times.per_request,
                jitter_cv=times.jitter_cv,
            )
            for name, times in doc.classes.items()
        },
        cold_start=doc.cold_start,
        warm_start=doc.warm_start,
        jitter_cv=doc.jitter_cv,
        per_request=doc.per_request,
    )


def default_times(spec: InferenceServiceSpec) -> ServiceTimeModel:
    """The model's own stated times, taken to be at the service's precision."""
    profile = service_profile(spec)
    return ServiceTimeModel(
        per_batch=profile.time_per_batch,
        per_item=profile.time_per_item,
        precision=spec.precision,
    )


def profile_from_spec(spec: InferenceServiceSpec, times: ServiceTimeModel) -> ServiceProfile:
    """The policy's view of the service with the simulator's times (reference class)."""
    factor = times.factor_for(spec.precision)
    base = service_profile(spec)
    return ServiceProfile(
        time_per_batch=times.per_batch * factor,
        time_per_item=times.per_item * factor,
        max_batch_size=base.max_batch_size,
        max_queue_delay=base.max_queue_delay,
        instances=base.instances,
        dynamic_batching=base.dynamic_batching,
        preferred_batch_sizes=base.preferred_batch_sizes,
    )


def batcher_from_spec(spec: InferenceServiceSpec) -> BatcherConfig:
    batching = spec.batching
    levels = batching.priority_levels
    default_level = batching.default_priority_level
    if default_level is None:  # the tier decides, as the operator renders it
        default_level = 1 if spec.tier == "interactive" or levels == 0 else levels
    policy = QueuePolicy()
    if batching.queue_policy is not None:
        qp = batching.queue_policy
        policy = QueuePolicy(
            max_queue_size=qp.max_queue_size,
            timeout=parse_duration(qp.timeout) if qp.timeout else 0.0,
            action="delay" if qp.timeout_action == "Delay" else "reject",
        )
    return BatcherConfig(
        max_batch_size=batching.max_batch_size,
        dynamic_batching=batching.max_batch_size > 0,
        preferred_batch_sizes=tuple(batching.preferred_batch_sizes),
        max_queue_delay=parse_duration(batching.max_queue_delay),
        priority_levels=levels,
        default_priority=default_level,
        default_policy=policy,
    )


def require_classes(
    spec: InferenceServiceSpec, classes: Mapping[str, AcceleratorClassSpec]
) -> None:
    """Raises ValueError naming every class the spec names that ``classes`` lacks: a
    prediction needs each class's speed and price."""
    missing = [name for name in spec.accelerators.classes if name not in classes]
    if missing:
        raise ValueError(
            f"accelerators.classes: AcceleratorClass {', '.join(map(repr, missing))} not given "
            "(a prediction needs the document of each class the service names)"
        )


def placement_order(
    spec: InferenceServiceSpec, classes: Mapping[str, AcceleratorClassSpec]
) -> tuple[list[str], list[ClassIssue]]:
    """The classes the operator's placement can use for the service, in its order, and why
    it skips the others (``gpuserve.placement.planning.usable_classes``: too little memory
    for the model, a precision the GPU lacks); ValueError naming them when none is left."""
    order, issues = usable_classes(spec, classes)
    if not order:
        reasons = "; ".join(issue.message for issue in issues)
        raise ValueError(f"accelerators.classes: no class can run the service ({reasons})")
    return order, issues


def sim_config_from_spec(
    *,
    spec: InferenceServiceSpec,
    classes: Mapping[str, AcceleratorClassSpec],
    times: ServiceTimeModel | None = None,
    balancing: Balancing = "random",
    scrape_interval: float = 5.0,
    seed: int = 1,
    capacity: Mapping[str, int] | None = None,
) -> SimConfig:
    """``capacity``: most pods of each class the cluster holds for the service (None or a
    missing class: unbounded). Every class the spec names must be in ``classes``; the
    pools are those its placement can use, in its order (``usable_classes``)."""
    require_classes(spec, classes)
    order, _ = placement_order(spec, classes)
    times = times or default_times(spec)
    factor = times.factor_for(spec.precision)
    pools = []
    for name in order:
        accel = classes[name]
        measured = times.classes.get(name) or ClassTimes()
        pools.append(
            AcceleratorPool(
                name=name,
                speed=accel.relative_speed,
                cost_per_hour=accel.cost_per_hour * spec.accelerators.gpus_per_pod,
                capacity=(capacity or {}).get(name),
                cold_start=times.cold_start,
                warm_start=times.warm_start,
                per_batch=None if measured.per_batch is None else measured.per_batch * factor,
                per_item=None if measured.per_item is None else measured.per_item * factor,
                per_request=measured.per_request,
                jitter_cv=measured.jitter_cv,
            )
        )
    scaling = spec.scaling
    return SimConfig(
        batcher=batcher_from_spec(spec),
        service=ServiceTimes(
            per_batch=times.per_batch,
            per_item=times.per_item,
            precision_factor=factor,
            jitter_cv=times.jitter_cv,
            per_request=times.per_request,
        ),
        classes=tuple(pools),
        slo_latency=spec.slo.latency_s,
        slo_quantile=spec.slo.percentile / 100.0,
        instances=spec.triton.instance_count,
        initial_replicas=max(1, scaling.min_replicas),
        warm_pool=scaling.warm_pool if scaling.warm_pool_mode == "fixed" else 0,
        balancing=balancing,
        scrape_interval=scrape_interval,
        rate_window=4 * scrape_interval,
        seed=seed,
    )
