"""What the spec's ``scaling.maxReplicas`` kept a decision from: the ``ScalingLimited``
condition (HPA's condition of that name and reasons, for the same case).

Both rules note the bound in the decision's reason and keep the count they wanted in the
signal ``uncapped``; status, events and a replay read it from there."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

UNCAPPED = "uncapped"


def note_cap(reason: str, signals: dict[str, float], *, wanted: int, max_replicas: int) -> str:
    """``reason`` with the bound named where ``wanted`` is past it (the signal set too)."""
    if wanted <= max_replicas:
        return reason
    signals[UNCAPPED] = float(wanted)
    return f"{reason}; capped at maxReplicas {max_replicas} (needs {wanted})"


def wanted_past_max(signals: Mapping[str, float], max_replicas: int) -> int | None:
    """The serving pods a decision wanted beyond ``max_replicas``, or None."""
    wanted = signals.get(UNCAPPED)
    return int(wanted) if wanted is not None and wanted > max_replicas else None


def limited_condition(
    signals: Mapping[str, float], *, max_replicas: int
) -> tuple[Literal["True", "False"], str, str]:
    """The ``ScalingLimited`` condition's status, reason and message after a decision. The
    message holds no count that moves from one evaluation to the next, so a service held
    at the bound is not written again each time; the decision's reason has the count."""
    if wanted_past_max(signals, max_replicas) is None:
        return (
            "False",
            "DesiredWithinRange",
            f"The autoscaler wants no more serving pods than scaling.maxReplicas ({max_replicas})",
        )
    return (
        "True",
        "TooManyReplicas",
        f"The autoscaler wants more serving pods than scaling.maxReplicas ({max_replicas}) "
        f"for the load it measures (status.lastDecision.reason says how many), so it "
        f"decides {max_replicas}; the requests those pods cannot serve within the objective "
        "wait or miss it",
    )


def limited_line(signals: Iterable[Mapping[str, float]], *, max_replicas: int) -> str:
    """What the ``ScalingLimited`` condition would have said over a replay, one line: how
    many of its decisions the bound capped, and the most any wanted."""
    decisions = capped = most = 0
    for s in signals:
        decisions += 1
        wanted = wanted_past_max(s, max_replicas)
        if wanted is not None:
            capped += 1
            most = max(most, wanted)
    if not capped:
        return (
            f"ScalingLimited=False DesiredWithinRange (throughout): no decision wanted more "
            f"than scaling.maxReplicas ({max_replicas})"
        )
    return (
        f"ScalingLimited=True TooManyReplicas: {capped} of {decisions} decisions wanted more "
        f"than scaling.maxReplicas ({max_replicas}), at most {most} serving pods"
    )
