"""The ScalingLimited condition: what scaling.maxReplicas kept a decision from."""

from __future__ import annotations

from gpuserve.autoscaling.limits import UNCAPPED, limited_condition, limited_line, note_cap


def test_a_need_past_the_bound_is_named_in_the_reason_and_kept_as_a_signal() -> None:
    signals: dict[str, float] = {}
    assert note_cap("demand 9 req/s", signals, wanted=7, max_replicas=7) == "demand 9 req/s"
    assert UNCAPPED not in signals
    reason = note_cap("demand 9 req/s", signals, wanted=9, max_replicas=7)
    assert reason == "demand 9 req/s; capped at maxReplicas 7 (needs 9)"
    assert signals[UNCAPPED] == 9.0


def test_the_condition_is_true_only_past_the_bound_and_its_message_has_no_moving_count() -> None:
    status, reason, message = limited_condition({UNCAPPED: 9.0}, max_replicas=7)
    assert (status, reason) == ("True", "TooManyReplicas")
    assert "scaling.maxReplicas (7)" in message
    # Another count past the bound writes the same condition: no status write per pass.
    assert limited_condition({UNCAPPED: 12.0}, max_replicas=7) == (status, reason, message)
    assert limited_condition({}, max_replicas=7)[:2] == ("False", "DesiredWithinRange")
    # A bound raised past what was wanted: no longer limited.
    assert limited_condition({UNCAPPED: 9.0}, max_replicas=10)[0] == "False"


def test_a_replay_counts_the_capped_decisions_and_the_most_wanted() -> None:
    line = limited_line([{}, {UNCAPPED: 9.0}, {UNCAPPED: 12.0}, {}], max_replicas=7)
    assert line.startswith("ScalingLimited=True TooManyReplicas: 2 of 4 decisions")
    assert "at most 12 serving pods" in line
    calm = limited_line([{}, {}], max_replicas=7)
    assert calm.startswith("ScalingLimited=False DesiredWithinRange (throughout)")
