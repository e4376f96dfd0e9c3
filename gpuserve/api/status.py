"""Status of gpuserve objects, following the Kubernetes API conventions.

Conditions carry type, status, reason, message, observedGeneration and
lastTransitionTime; a condition's transition time only moves when its status flips,
so re-reconciling an unchanged object leaves status byte-for-byte equal (no write).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from gpuserve.autoscaling.service_scale import SCALE_BOUNDS as SERVICE_SCALE_BOUNDS

ConditionStatus = Literal["True", "False", "Unknown"]


class _Status(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class Condition(_Status):
    type: str = Field(description="Condition type, e.g. Ready, Reconciling, Stalled.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase reason for the last transition.")
    message: str = Field(default="", description="Human-readable detail.")
    observed_generation: int | None = Field(
        default=None, description="metadata.generation this condition was computed from."
    )
    last_transition_time: str | None = Field(
        default=None, description="When status last changed (RFC 3339)."
    )


class PoolStatus(_Status):
    accelerator_class: str = Field(description="AcceleratorClass of this pool.")
    replicas: int = Field(default=0, description="Pods of the pool (serving and warm).")
    ready: int = Field(default=0, description="Pods whose model is loaded.")
    serving: int = Field(
        default=0, description="Ready serving pods (in the Service, or routed around for now)."
    )
    warm: int = Field(default=0, description="Ready standby pods out of the Service.")
    pending: int = Field(default=0, description="Pods not yet scheduled.")


class ScalingDecisionStatus(_Status):
    time: str = Field(description="When the decision was taken (RFC 3339).")
    desired_replicas: int = Field(description="Serving pods the autoscaler wants.")
    reason: str = Field(description="Why, in words.")
    signals: dict[str, float | None] = Field(
        default_factory=dict, description="Metric values the decision used."
    )
    applied: bool = Field(default=True, description="False in advisory mode.")


class RoutedAroundStatus(_Status):
    pod: str = Field(description="A serving pod the Service routes around for now.")
    queued: float = Field(description="Requests waiting in its queue when last measured.")
    clears: float = Field(description="Requests it clears within the queue budget.")


class KedaCalibrationStatus(_Status):
    time: str = Field(description="When Triton's compute time was measured (RFC 3339).")
    compute_ms: float = Field(
        description="Triton's mean compute time per request over the stable window, ms (a "
        "batch's time counts for each of its requests)."
    )
    mean_batch: float = Field(description="The mean batch those requests ran in.")
    relative_speed: float = Field(
        description="The relative speed of the pods measured: their AcceleratorClasses' "
        "speeds, weighted by the number of ready serving pods of each."
    )
    service_scale: float = Field(
        description="Measured over stated execution time (1: the measurement agrees with "
        "spec.serviceTimes); the ScaledObject's threshold is rendered for it.",
        json_schema_extra={"minimum": SERVICE_SCALE_BOUNDS[0], "maximum": SERVICE_SCALE_BOUNDS[1]},
    )
    message: str = Field(default="", description="What was measured and what it changes.")

    # Written only by the operator, but status can be edited by hand: a value out of range
    # is read as the nearest one the operator could have written, never as 0.
    @field_validator("service_scale")
    @classmethod
    def _within_bounds(cls, value: float) -> float:
        return min(max(value, SERVICE_SCALE_BOUNDS[0]), SERVICE_SCALE_BOUNDS[1])

    @field_validator("relative_speed")
    @classmethod
    def _positive(cls, value: float) -> float:
        return value if value > 0.0 else 1.0


class KedaTokenMixStatus(_Status):
    time: str = Field(description="When the token mix was measured (RFC 3339).")
    prompt_tokens: float = Field(description="Mean prompt tokens over the stable window.")
    prompt_tokens_high: float = Field(
        description="Prompt tokens at the objectives' percentile (slo.percentile)."
    )
    output_tokens: float = Field(description="Mean output tokens.")
    prefix_hit_rate: float = Field(
        default=0.0, description="Share of prompt tokens found in the prefix cache."
    )
    # The prompts' higher moments: attention grows with a prompt's square, so the spread
    # of the mix, not only its mean, sets what a replica serves.
    prompt_square_mean: float | None = Field(
        default=None, description="Mean of the prompts' squared lengths."
    )
    prompt_cube_mean: float | None = Field(
        default=None, description="Mean of the prompts' cubed lengths."
    )
    prompt_fourth_mean: float | None = Field(
        default=None, description="Mean of the prompts' lengths to the fourth power."
    )
    time_scale: float | None = Field(
        default=None,
        description="The factor on the engines' modelled time costs that the replicas' "
        "measured time per output token gives over the stable window; "
        "absent: the engines as modelled.",
    )
    requests_per_replica: float = Field(
        description="The per-replica request rate the LLM rule gives this mix on the "
        "ScaledObject's class; its thresholds are rendered from it."
    )
    message: str = Field(default="", description="What was measured and what it changes.")


class InferenceServiceStatus(_Status):
    observed_generation: int | None = Field(
        default=None, description="Last metadata.generation fully reconciled."
    )
    conditions: list[Condition] = Field(default_factory=list, description="Standard conditions.")
    replicas: int = Field(default=0, description="Serving pods that are ready.")
    desired_replicas: int | None = Field(
        default=None, description="Serving pods wanted now (autoscaler or minReplicas)."
    )
    warm_replicas: int = Field(default=0, description="Ready standby pods.")
    desired_warm_pool: int | None = Field(
        default=None,
        description="Standby pods the autoscaler wants (scaling.warmPoolMode auto only).",
    )
    pools: list[PoolStatus] = Field(default_factory=list, description="Per AcceleratorClass.")
    routed_around: list[RoutedAroundStatus] = Field(
        default_factory=list,
        description="Serving pods out of the Service while they clear a queue deeper than "
        "they clear within the queue budget (role routed-around); they rejoin once it is "
        "cleared. At most half the serving pods, and only while the rest carry the arrivals "
        "and the bursts seen.",
    )
    accelerators: str = Field(default="", description="Classes in use, for printing.")
    endpoint: str | None = Field(default=None, description="In-cluster gRPC endpoint.")
    config_hash: str | None = Field(default=None, description="Hash of the rendered config.")
    p95_ms: float | None = Field(default=None, description="Last measured p95 latency, ms.")
    last_decision: ScalingDecisionStatus | None = Field(
        default=None, description="The autoscaler's most recent decision."
    )
    decisions: list[ScalingDecisionStatus] = Field(
        default_factory=list, description="Recent decisions that changed the size (<= 5)."
    )
    autoscaler_memory: dict[str, Any] = Field(
        default_factory=dict, description="The autoscaler's state between evaluations."
    )
    keda_calibration: KedaCalibrationStatus | None = Field(
        default=None,
        description="scaling.engine keda: the compute time measured from Triton that the "
        "ScaledObject's request-rate threshold is sized by (absent until measured).",
    )
    keda_token_mix: KedaTokenMixStatus | None = Field(
        default=None,
        description="scaling.engine keda, an LLM service with token objectives: the token "
        "mix measured from its vLLM series that the ScaledObject's thresholds are sized for "
        "(absent until measured).",
    )


class AcceleratorClassStatus(_Status):
    observed_generation: int | None = Field(default=None, description="Last generation seen.")
    conditions: list[Condition] = Field(default_factory=list, description="Standard conditions.")
    nodes: int = Field(default=0, description="Nodes matching this class.")
    capacity: int = Field(default=0, description="GPUs or slices on matching nodes.")
    allocated: int = Field(default=0, description="GPUs or slices requested by pods.")
