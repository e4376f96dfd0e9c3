"""Setting conditions the Kubernetes way.

lastTransitionTime moves only when a condition's status flips, and the list keeps a
fixed order, so recomputing an unchanged state yields an equal list (and no write).
"""

from __future__ import annotations

from gpuserve.api.status import Condition, ConditionStatus

ORDER = (
    "Ready",
    "Reconciling",
    "Stalled",
    "Schedulable",
    "MetricsAvailable",
    "BurstsCovered",
    "ScalingLimited",
    "InferencePoolApplied",
)

# Written by the builtin autoscaler's evaluations only. Under another engine none runs,
# so they would go on saying what the last one found.
AUTOSCALER_CONDITIONS = ("MetricsAvailable", "BurstsCovered", "ScalingLimited")


def set_condition(
    conditions: list[Condition],
    *,
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int | None,
    now: str,
) -> list[Condition]:
    """A new list with ``type_`` set; the others are kept as they are."""
    previous = next((c for c in conditions if c.type == type_), None)
    same = previous is not None and previous.status == status
    since = previous.last_transition_time if same and previous is not None else now
    updated = Condition(
        type=type_, status=status, reason=reason, message=message,
        observed_generation=generation, last_transition_time=since,
    )
    rest = [c for c in conditions if c.type != type_]
    return sorted([*rest, updated], key=_rank)


def without(conditions: list[Condition], types: tuple[str, ...]) -> list[Condition]:
    """The conditions but those of ``types`` (a condition that no longer applies is
    removed, not left to say what it said last)."""
    return [c for c in conditions if c.type not in types]


def _rank(c: Condition) -> tuple[int, str]:
    return (ORDER.index(c.type) if c.type in ORDER else len(ORDER), c.type)



class ConditionWriter:
    """Sets several conditions of one object for one generation at one moment."""

    def __init__(self, conditions: list[Condition], *, generation: int | None, now: str) -> None:
        self.conditions = conditions
        self.generation = generation
        self.now = now

    def set(self, type_: str, status: ConditionStatus, reason: str, message: str) -> None:
        self.conditions = set_condition(
            self.conditions, type_=type_, status=status, reason=reason, message=message,
            generation=self.generation, now=self.now,
        )
