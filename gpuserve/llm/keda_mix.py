"""Under `scaling.engine: keda`, an LLM service's ScaledObject follows the token mix its
replicas were measured serving.

The rendered thresholds (gpuserve.resources.keda.llm_keda_scaling) are the LLM rule's
per-replica rate on a token mix: before any measurement, the one the spec states
(`llm.expectedTokens`) or the default chat mix. A service whose prompts are ten times
longer than that would stay short of replicas by about that factor, and KEDA sees only
request counts. The builtin engine sizes from the measured mix at every evaluation;
under KEDA the operator takes the same measurement (the stable window's ``LoadShape``),
records it in status, and the reconcile renders the thresholds for it. The engines are
priced as the builtin engine prices them: at the factor on their modelled time costs that
the stable window's time per output token gives (``gpuserve.llm.calibrating``), recorded
beside the mix. As for the request-level record (gpuserve.autoscaling.keda_calibration),
a new measurement replaces the recorded one only when it moves the per-replica rate by
more than ``BAND``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuserve.api.models import InferenceServiceSpec
from gpuserve.api.status import KedaTokenMixStatus
from gpuserve.autoscaling.keda_calibration import BAND
from gpuserve.llm.calibrating import SCALE_BOUNDS, scaled
from gpuserve.llm.capacity import LoadShape
from gpuserve.llm.deciding import LLMPolicy, sizing
from gpuserve.llm.from_spec import llm_policy_from_spec
from gpuserve.llm.observing import Observation


@dataclass(frozen=True, slots=True)
class KedaTokenMix:
    """A measured token mix, the factor on the engines' time costs measured with it, and
    the per-replica rate the LLM rule gives them."""

    shape: LoadShape
    per_replica: float  # requests/s one replica of the ScaledObject's class is sized for
    time_scale: float | None = None  # None: the engines as modelled


def sized_for(policy: LLMPolicy, mix: KedaTokenMix | None) -> LLMPolicy:
    """``policy`` sizing for the recorded mix on engines priced as recorded, where there
    is a record."""
    if mix is None:
        return policy
    return scaled(replace(policy, fallback_shape=mix.shape), mix.time_scale)


def measure_mix(
    recorded: KedaTokenMix | None,
    stable: Observation | None,
    *,
    serving_ready: int,
    policy: LLMPolicy,
    class_name: str,
    time_scale: float | None = None,
) -> KedaTokenMix | None:
    """The mix to record now from the stable window, or None to keep ``recorded`` (the
    operator's pass and the replay both judge by this). ``time_scale``: the factor the
    replicas measure now (``calibrating.fitted_scale``); None keeps the recorded one.

    Without a measurement (no request in the window, or no serving replica ready), the
    recorded mix is judged again against ``policy``: objectives or classes that changed
    move the thresholds at once."""
    fresh = stable.shape if stable is not None and serving_ready > 0 else None
    shape = fresh if fresh is not None else recorded.shape if recorded is not None else None
    if shape is None:
        return None
    if time_scale is None and recorded is not None:
        time_scale = recorded.time_scale
    per_replica = sizing(scaled(policy, time_scale), class_name, shape).per_replica
    if recorded is not None and per_replica > 0 and recorded.per_replica > 0:
        ratio = per_replica / recorded.per_replica
        if max(ratio, 1.0 / ratio) <= BAND:
            return None
    factor = None if time_scale is None else round(time_scale, 3)
    return KedaTokenMix(shape, round(per_replica, 3), factor)


def describe_mix(mix: KedaTokenMix, policy: LLMPolicy, class_name: str, quantile: float) -> str:
    """What was measured and what it does to the thresholds, for status and events."""
    s, stated = mix.shape, policy.fallback_shape
    before = sizing(policy, class_name, stated).per_replica
    priced = (
        ""
        if mix.time_scale is None
        else f", the engines measured at {mix.time_scale:.2f}x their modelled time costs"
    )
    return (
        f"measured prompts of {s.prompt_mean:.0f} tokens on average ({s.prompt_high:.0f} at "
        f"p{100 * quantile:g}), {s.output_mean:.0f} output tokens, {s.prefix_hit_rate:.0%} of "
        f"prompt tokens cached{priced}: the LLM rule gives it {mix.per_replica:.2f} req/s per "
        f"{class_name} replica (the stated mix of {stated.prompt_mean:.0f}/"
        f"{stated.output_mean:.0f} tokens: {before:.2f}), and the ScaledObject's thresholds "
        "are rendered from it"
    )


def mix_measured(spec: InferenceServiceSpec) -> bool:
    """Whether the service's ScaledObject follows the measured token mix: a KEDA service
    the builtin engine would size with the LLM rule (an LLM format with a TTFT or TPOT
    objective), the rule its thresholds are rendered by."""
    return spec.scaling.engine == "keda" and llm_policy_from_spec(spec) is not None


def recorded_mix(found: KedaTokenMixStatus | None) -> KedaTokenMix | None:
    """The record ``status.kedaTokenMix`` holds. Status can be edited by hand: a value
    out of range is read as the nearest one the operator could have written."""
    if found is None:
        return None
    shape = LoadShape(
        max(1.0, found.prompt_tokens),
        max(1.0, found.prompt_tokens, found.prompt_tokens_high),
        max(1.0, found.output_tokens),
        prefix_hit_rate=min(max(found.prefix_hit_rate, 0.0), 0.99),
        prompt_square_mean=_non_negative(found.prompt_square_mean),
        prompt_cube_mean=_non_negative(found.prompt_cube_mean),
        prompt_fourth_mean=_non_negative(found.prompt_fourth_mean),
    )
    scale = found.time_scale
    if scale is not None:
        scale = None if math.isnan(scale) else min(max(scale, SCALE_BOUNDS[0]), SCALE_BOUNDS[1])
    return KedaTokenMix(shape, found.requests_per_replica, scale)


def _non_negative(value: float | None) -> float | None:
    return None if value is None or not value >= 0 else value
