"""The LLM scaling policy of an InferenceService, from its spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gpuserve.api.durations import parse_duration
from gpuserve.api.models import LLM_FORMATS, AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.llm.capacity import TokenObjectives
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.gpus import engine_params_for_class
from gpuserve.llm.params import EngineParams

# An objective the spec leaves unset: never the binding one.
UNSET_OBJECTIVE_S = 1e9


def llm_policy_from_spec(
    spec: InferenceServiceSpec,
    params: EngineParams | None = None,
    classes: Mapping[str, AcceleratorClassSpec] | None = None,
) -> LLMPolicy | None:
    """None unless the service is an LLM format with a TTFT or TPOT objective. ``params``
    stands for the engine where nothing better is known (defaults: Llama 3 8B on an H100);
    each of the service's ``classes`` whose GPU and model size are known gets its own
    (gpuserve.llm.gpus). The spec's running-sequence bound, context length and prefix
    caching override both."""
    if spec.model.format not in LLM_FORMATS or spec.llm is None:
        return None
    slo = spec.slo
    if slo.ttft is None and slo.tpot is None:
        return None
    engine = replace(
        params or EngineParams(),
        max_running=spec.llm.max_running_sequences,
        max_model_len=spec.llm.max_context_length,
        prefix_caching=spec.llm.prefix_caching,
    )
    by_class = {
        name: derived
        for name in spec.accelerators.classes
        if name in (classes or {})
        and (derived := engine_params_for_class(spec, (classes or {})[name], engine)) is not None
    }
    objectives = TokenObjectives(
        ttft_s=parse_duration(slo.ttft) if slo.ttft is not None else UNSET_OBJECTIVE_S,
        tpot_s=parse_duration(slo.tpot) if slo.tpot is not None else UNSET_OBJECTIVE_S,
        quantile=max(0.5, slo.percentile / 100.0),
    )
    scaling = spec.scaling
    return LLMPolicy(
        objectives,
        engine,
        min_replicas=scaling.min_replicas,
        max_replicas=scaling.max_replicas,
        scale_down_window_s=parse_duration(scaling.scale_down_stabilization),
        by_class=by_class,
    )
