"""The LLM scaling policy of an InferenceService, from its spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gpuserve.api.durations import parse_duration
from gpuserve.api.models import LLM_FORMATS, AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.llm.capacity import TokenObjectives, default_shape
from gpuserve.llm.chunking import chunk_for_objective
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
    engine, by_class = service_engines(spec, classes or {}, params)
    objectives = TokenObjectives(
        ttft_s=parse_duration(slo.ttft) if slo.ttft is not None else UNSET_OBJECTIVE_S,
        tpot_s=parse_duration(slo.tpot) if slo.tpot is not None else UNSET_OBJECTIVE_S,
        quantile=max(0.5, slo.percentile / 100.0),
    )
    scaling = spec.scaling
    mix = spec.llm.expected_tokens
    return LLMPolicy(
        objectives,
        engine,
        min_replicas=scaling.min_replicas,
        max_replicas=scaling.max_replicas,
        scale_down_window_s=parse_duration(scaling.scale_down_stabilization),
        by_class=by_class,
        fallback_shape=(
            default_shape()
            if mix is None
            else default_shape(
                mix.prompt,
                mix.output,
                mix.prompt_high,
                longest=spec.llm.max_context_length - mix.output,
            )
        ),
    )


def service_engines(
    spec: InferenceServiceSpec,
    classes: Mapping[str, AcceleratorClassSpec],
    params: EngineParams | None = None,
) -> tuple[EngineParams, dict[str, EngineParams]]:
    """The engine that stands in where nothing better is known (``params``, default Llama
    3 8B on an H100, with a cache that holds the spec's context), and one for each of the
    service's ``classes`` whose GPU and model size are known; all with the spec's bounds
    and the prefill chunk budget the pods are given."""
    llm = spec.llm
    if llm is None:
        raise ValueError(f"llm: required for model.format {spec.model.format}")
    base = params or EngineParams()
    engine = replace(
        base,
        num_blocks=max(base.num_blocks, base.blocks_for(llm.max_context_length)),
        max_running=llm.max_running_sequences,
        max_model_len=llm.max_context_length,
        prefix_caching=llm.prefix_caching,
    )
    by_class = {
        name: derived
        for name in spec.accelerators.classes
        if name in classes
        and (derived := engine_params_for_class(spec, classes[name], engine)) is not None
    }
    chunk = _batched_tokens(spec, by_class)
    if chunk is None:
        return engine, by_class
    return replace(engine, max_batched_tokens=chunk), {
        name: replace(e, max_batched_tokens=chunk) for name, e in by_class.items()
    }


def rendered_batched_tokens(
    spec: InferenceServiceSpec, classes: Mapping[str, AcceleratorClassSpec]
) -> int | None:
    """The prefill chunk budget written into a vLLM service's model.json; None for other
    formats, and where the engine's own default stands."""
    if spec.model.format != "vllm" or spec.llm is None:
        return None
    _, by_class = service_engines(spec, classes)
    return _batched_tokens(spec, by_class)


def _batched_tokens(spec: InferenceServiceSpec, by_class: Mapping[str, EngineParams]) -> int | None:
    """The spec's budget, or for vLLM the one its TPOT objective calls for on its most
    preferred class with a known engine (TensorRT-LLM fixes its budget when the engine is
    built); None where the engine's default stands."""
    llm = spec.llm
    if llm is not None and llm.max_batched_tokens is not None:
        return llm.max_batched_tokens
    if spec.model.format != "vllm" or spec.slo.tpot is None:
        return None
    preferred = next((by_class[c] for c in spec.accelerators.classes if c in by_class), None)
    if preferred is None:
        return None
    return chunk_for_objective(preferred, parse_duration(spec.slo.tpot))
