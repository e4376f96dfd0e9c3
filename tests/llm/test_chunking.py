"""The prefill chunk budget (vLLM's max_num_batched_tokens) derived from a TPOT objective."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.llm.chunking import (
    MAX_STEP_OVERHEAD,
    VLLM_DEFAULT_BATCHED_TOKENS,
    chunk_for_objective,
)
from gpuserve.llm.from_spec import llm_policy_from_spec, service_engines
from gpuserve.llm.params import EngineParams

REPO_ROOT = Path(__file__).resolve().parents[2]
H100 = EngineParams()  # Llama 3 8B on an H100, as measured


def _step(engine: EngineParams, chunk: int) -> float:
    """A step that computes the last chunk of the longest prompt the engine admits: its
    tokens, and their attention to each other and to the whole prompt before them."""
    before = engine.max_model_len - chunk
    return (
        engine.decode_base_s
        + chunk * engine.prefill_s_per_token
        + chunk * (before + (chunk + 1) / 2) * engine.prefill_s_per_token_pair
    )


@pytest.mark.parametrize("tpot_ms", [30, 50, 60, 100, 150, 250, 400])
def test_the_budget_is_the_largest_power_of_two_whose_step_fits_the_objective(
    tpot_ms: int,
) -> None:
    tpot = tpot_ms / 1000
    chunk = chunk_for_objective(H100, tpot)
    assert chunk & (chunk - 1) == 0 and chunk <= VLLM_DEFAULT_BATCHED_TOKENS
    floor = chunk_for_objective(H100, 0.0)  # what no objective can push it below
    if chunk > floor:
        assert _step(H100, chunk) <= tpot
    if chunk < VLLM_DEFAULT_BATCHED_TOKENS:
        assert _step(H100, 2 * chunk) > tpot


def test_an_h100_gets_the_budgets_the_simulated_sweep_found_best() -> None:
    # docs/llm.md, "Prefill chunks": 1,024 at 50 ms, 2,048 at 100 ms.
    assert chunk_for_objective(H100, 0.05) == 1024
    assert chunk_for_objective(H100, 0.10) == 2048
    # An objective no step can miss keeps vLLM's default.
    assert chunk_for_objective(H100, 10.0) == VLLM_DEFAULT_BATCHED_TOKENS


def test_a_longer_context_gets_smaller_chunks_for_the_same_objective() -> None:
    # A chunk late in a 128k-token prompt attends to all of it: 2,048 tokens there take
    # 0.48 s, so a 100 ms objective gets the floor where an 8k context gets 2,048.
    long = replace(H100, max_model_len=131_072, num_blocks=131_072 // 16)
    assert chunk_for_objective(H100, 0.1) == 2048
    assert chunk_for_objective(long, 0.1) == 1024 == chunk_for_objective(long, 0.0)
    assert _step(long, 2048) > 0.4


def test_no_budget_is_so_small_that_the_step_cost_dwarfs_its_prefill() -> None:
    # A slow engine whose bare step already exceeds the objective: chunking cannot hold
    # the objective, and tiny chunks would only slow every prefill.
    slow = H100.slower(9.0)
    chunk = chunk_for_objective(slow, 0.05)
    assert slow.decode_base_s > 0.05
    assert slow.decode_base_s <= MAX_STEP_OVERHEAD * chunk * slow.prefill_s_per_token
    assert slow.decode_base_s > MAX_STEP_OVERHEAD * (chunk // 2) * slow.prefill_s_per_token


def test_the_budget_is_never_below_the_running_sequence_bound() -> None:
    # vLLM refuses max_num_batched_tokens < max_num_seqs.
    many = replace(H100, max_running=3000)
    assert chunk_for_objective(many, 0.05) >= 3000


def _spec(**llm: Any) -> InferenceServiceSpec:
    raw: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "llama-vllm.yaml").read_text())
    raw["spec"]["llm"].update(llm)
    return InferenceServiceSpec.model_validate(raw["spec"])


def _classes() -> dict[str, AcceleratorClassSpec]:
    docs = yaml.safe_load_all((REPO_ROOT / "examples" / "accelerator-classes.yaml").read_text())
    return {d["metadata"]["name"]: AcceleratorClassSpec.model_validate(d["spec"]) for d in docs}


def test_the_scaler_models_the_chunks_the_pods_are_given() -> None:
    classes = _classes()
    policy = llm_policy_from_spec(_spec(), classes=classes)
    assert policy is not None
    # The example's objective is 60 ms on the H100 first: 1,024 tokens (the last chunk of
    # an 8,192-token prompt takes 44 ms, a 2,048-token one 80 ms), on every class.
    assert policy.params.max_batched_tokens == 1024
    assert {e.max_batched_tokens for e in policy.by_class.values()} == {1024}
    explicit = llm_policy_from_spec(_spec(maxBatchedTokens=512), classes=classes)
    assert explicit is not None and explicit.params.max_batched_tokens == 512


def test_a_context_longer_than_the_default_cache_still_gives_a_policy() -> None:
    # The stand-in engine grows its cache to the spec's context instead of refusing it.
    engine, _ = service_engines(_spec(maxContextLength=1_000_000), {})
    assert engine.max_model_len == 1_000_000 <= engine.capacity_tokens


def test_a_budget_below_the_running_sequences_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match=r"llm\.maxBatchedTokens: must be at least"):
        _spec(maxBatchedTokens=64, maxRunningSequences=128)
