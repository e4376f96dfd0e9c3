"""Under KEDA an LLM service's thresholds follow the token mix its replicas served
(``gpuserve.llm.keda_mix``): recorded when it moves the per-replica rate beyond the band,
judged again without traffic, read back from status as the operator could have written."""

from __future__ import annotations

from dataclasses import replace

from gpuserve.api.status import KedaTokenMixStatus
from gpuserve.llm.capacity import LoadShape, TokenObjectives
from gpuserve.llm.deciding import LLMPolicy, sizing
from gpuserve.llm.keda_mix import KedaTokenMix, measure_mix, recorded_mix, sized_for
from gpuserve.llm.observing import Observation

POLICY = LLMPolicy(TokenObjectives(ttft_s=1.0, tpot_s=0.05))
CLASS = "gpu"


def _window(prompt: float, output: float, high: float | None = None) -> Observation:
    shape = LoadShape(prompt, high or 3 * prompt, output)
    return Observation(60.0, 60.0, 5.0, shape, None, None, None, 0.0, 0.0, 0.0, 0.0)


def _measure(
    recorded: KedaTokenMix | None, window: Observation | None, ready: int = 1
) -> KedaTokenMix | None:
    return measure_mix(recorded, window, serving_ready=ready, policy=POLICY, class_name=CLASS)


def test_a_first_measurement_is_recorded_with_the_rate_the_rule_gives_it() -> None:
    window = _window(8000, 300)
    first = _measure(None, window)
    assert first is not None and first.shape == window.shape
    assert first.per_replica == round(sizing(POLICY, CLASS, window.shape).per_replica, 3)
    # Long prompts: far fewer requests a replica than the default chat mix.
    default = sizing(POLICY, CLASS, POLICY.fallback_shape).per_replica
    assert first.per_replica < 0.5 * default
    # The policy then sizes for it.
    assert sized_for(POLICY, first).fallback_shape == window.shape
    assert sized_for(POLICY, None) is POLICY


def test_a_mix_within_the_band_keeps_the_record_and_one_beyond_replaces_it() -> None:
    first = _measure(None, _window(2000, 200))
    assert first is not None
    assert _measure(first, _window(2040, 202)) is None  # a few percent: noise
    moved = _measure(first, _window(6000, 400))
    assert moved is not None and moved.per_replica < first.per_replica / 1.15


def test_without_a_measurement_the_record_is_judged_again_against_the_policy() -> None:
    first = _measure(None, _window(2000, 200))
    assert first is not None
    assert _measure(first, None) is None
    # Executions seen while no replica is ready say nothing of the mix they ran at.
    assert _measure(first, _window(9000, 900), ready=0) is None
    # A tighter TPOT objective moves the rate: the same mix, sized again.
    tight = replace(POLICY, objectives=TokenObjectives(ttft_s=1.0, tpot_s=0.02))
    again = measure_mix(first, None, serving_ready=1, policy=tight, class_name=CLASS)
    assert again is not None and again.shape == first.shape
    assert again.per_replica < first.per_replica / 1.15
    assert _measure(None, None) is None


def test_a_hand_edited_record_is_read_as_the_nearest_the_operator_could_write() -> None:
    found = KedaTokenMixStatus(
        time="2026-12-07T00:00:00Z",
        prompt_tokens=0.0,
        prompt_tokens_high=-5.0,
        output_tokens=120.0,
        prefix_hit_rate=1.5,
        prompt_square_mean=-1.0,
        requests_per_replica=3.0,
    )
    mix = recorded_mix(found)
    assert mix is not None
    assert mix.shape.prompt_mean == 1.0 and mix.shape.prompt_high == 1.0
    assert mix.shape.prefix_hit_rate < 1.0 and mix.shape.prompt_square_mean is None
    assert recorded_mix(None) is None


def test_engines_measured_slower_lower_the_rate_and_the_factor_is_kept() -> None:
    window = _window(2000, 200)
    plain = _measure(None, window)
    slow = measure_mix(
        None, window, serving_ready=1, policy=POLICY, class_name=CLASS, time_scale=2.0
    )
    assert plain is not None and plain.time_scale is None
    assert slow is not None and slow.time_scale == 2.0
    assert slow.per_replica < 0.7 * plain.per_replica
    # The policy the thresholds are rendered from prices its engines at the factor.
    priced = sized_for(POLICY, slow)
    assert priced.params.decode_base_s == 2.0 * POLICY.params.decode_base_s
    assert window.shape is not None
    assert abs(sizing(priced, CLASS, window.shape).per_replica - slow.per_replica) < 1e-3
    # No factor measured now (no traffic fitted): the recorded one stands.
    assert measure_mix(slow, window, serving_ready=1, policy=POLICY, class_name=CLASS) is None
    # A factor that moves the rate beyond the band is recorded.
    faster = measure_mix(
        slow, window, serving_ready=1, policy=POLICY, class_name=CLASS, time_scale=1.0
    )
    assert faster is not None and faster.time_scale == 1.0


def test_a_recorded_factor_is_read_within_the_bounds_a_fit_can_give() -> None:
    def read(scale: float | None) -> float | None:
        found = KedaTokenMixStatus(
            time="2026-12-07T00:00:00Z",
            prompt_tokens=900.0,
            prompt_tokens_high=2000.0,
            output_tokens=120.0,
            time_scale=scale,
            requests_per_replica=3.0,
        )
        mix = recorded_mix(found)
        assert mix is not None
        return mix.time_scale

    assert read(None) is None and read(1.7) == 1.7
    assert read(1e6) == 100.0 and read(0.0) == 0.01 and read(float("nan")) is None
