"""What the policy returns and the small memory the caller keeps between calls."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuserve.autoscaling.outruns import OutrunReport, Outruns
from gpuserve.autoscaling.shedding import RoutedAround

Mode = Literal["hold", "steady", "panic"]


@dataclass(frozen=True, slots=True)
class ClassAction:
    """Changes to the pods of one AcceleratorClass.

    promote_warm: warm-pool pods to move into the Service (cheap, seconds).
    start: new pods to create for serving (cold start).
    remove: serving pods to take out; the caller removes starting pods first.
    """

    name: str
    promote_warm: int = 0
    start: int = 0
    remove: int = 0

    @property
    def delta(self) -> int:
        return self.promote_warm + self.start - self.remove


def added_up(actions: Sequence[ClassAction]) -> ClassAction:
    """The actions of every class as one: what a decision does to the service as a whole."""
    return ClassAction(
        "all",
        promote_warm=sum(a.promote_warm for a in actions),
        start=sum(a.start for a in actions),
        remove=sum(a.remove for a in actions),
    )


@dataclass(frozen=True, slots=True)
class PolicyMemory:
    """State the policy carries between evaluations; the operator keeps it in status.

    recommendations: (time, desired replicas) over the scale-down window.
    surges: one record per minute over the burst memory: (start, largest rise of demand
        within one start-up time beyond its measured noise, req/s; the minute's mean
        demand, req/s; the demand that rise rose from, req/s).
    dispersions: one record per minute over the burst memory (the LLM rule): (start, sum
        of the evaluations' estimates of the arrivals' index of dispersion, evaluations);
        ``gpuserve.llm.dispersion``.
    outruns: one record per stretch of evaluations over the burst memory that measured a
        surge past what the pods able to serve within seconds serve: (first and last
        evaluation, the highest rate, req/s; the pods able to serve when it began, the
        most during it); ``gpuserve.autoscaling.outruns``.
    time_scale: the factor on the LLM engines' modelled time costs last priced at, and
        prefill_scale the floor on the prompts' costs beyond it
        (``gpuserve.llm.calibrating``); time_fits: (time, load, factor, floor) of the
        fits kept, one a minute, that price a window with those taken at like loads.
    since: time of the first evaluation this memory has seen; until a whole scale-down
        window has been observed, the current size counts as a recommendation (after an
        operator restart the policy cannot know what it recommended before).
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    since: float | None = None
    last_scale_up: float | None = None
    last_scale_down: float | None = None
    panic_until: float | None = None
    surges: tuple[tuple[float, float, float, float], ...] = ()
    dispersions: tuple[tuple[float, float, int], ...] = ()
    outruns: Outruns = ()
    time_scale: float | None = None
    prefill_scale: float | None = None
    time_fits: tuple[tuple[float, float, float, float], ...] = ()

    def to_status(self) -> dict[str, Any]:
        return {
            "recommendations": [[t, n] for t, n in self.recommendations],
            "surges": [[t, round(v, 3), round(d, 3), round(b, 3)] for t, v, d, b in self.surges],
            "dispersions": [[t, round(s, 3), n] for t, s, n in self.dispersions],
            "outruns": [[s, t, round(r, 3), a, m] for s, t, r, a, m in self.outruns],
            "timeScale": self.time_scale,
            "prefillScale": self.prefill_scale,
            "timeFits": [
                [t, round(u, 4), round(k, 4), round(p, 4)] for t, u, k, p in self.time_fits
            ],
            "since": self.since,
            "lastScaleUp": self.last_scale_up,
            "lastScaleDown": self.last_scale_down,
            "panicUntil": self.panic_until,
        }

    @classmethod
    def from_status(cls, body: dict[str, Any] | None) -> PolicyMemory:
        """Tolerant of missing or malformed fields: a bad status must not stop scaling."""
        if not body:
            return cls()
        recs: list[tuple[float, int]] = []
        for entry in body.get("recommendations") or []:
            try:
                recs.append((float(entry[0]), int(entry[1])))
            except (TypeError, ValueError, IndexError):
                continue
        surges: list[tuple[float, float, float, float]] = []
        for entry in body.get("surges") or []:
            try:
                t, v, d = float(entry[0]), float(entry[1]), float(entry[2])
                # Records written before the fourth field took the level as the base.
                b = float(entry[3]) if len(entry) > 3 else d
            except (TypeError, ValueError, IndexError):
                continue
            surges.append((t, v, d, b))
        dispersions = _minutes(body.get("dispersions"))
        outruns: list[tuple[float, float, float, int, int]] = []
        for entry in body.get("outruns") or []:
            try:
                first, last, rate = float(entry[0]), float(entry[1]), float(entry[2])
                outruns.append((first, last, rate, int(entry[3]), int(entry[4])))
            except (TypeError, ValueError, IndexError):
                continue
        return cls(
            recommendations=tuple(recs),
            since=_float_or_none(body.get("since")),
            last_scale_up=_float_or_none(body.get("lastScaleUp")),
            last_scale_down=_float_or_none(body.get("lastScaleDown")),
            panic_until=_float_or_none(body.get("panicUntil")),
            surges=tuple(surges),
            dispersions=dispersions,
            outruns=tuple(outruns),
            time_scale=_positive_or_none(body.get("timeScale")),
            prefill_scale=_positive_or_none(body.get("prefillScale")),
            time_fits=_fits(body.get("timeFits")),
        )


def _minutes(entries: object) -> tuple[tuple[float, float, int], ...]:
    """Per-minute (start, sum, evaluations) records; malformed or non-finite ones left out
    (status can be edited by hand)."""
    found: list[tuple[float, float, int]] = []
    for entry in entries if isinstance(entries, list) else []:
        try:
            record = (float(entry[0]), float(entry[1]), int(entry[2]))
        except (TypeError, ValueError, IndexError, OverflowError):
            continue
        if math.isfinite(record[0]) and math.isfinite(record[1]):
            found.append(record)
    return tuple(found)


def _fits(entries: object) -> tuple[tuple[float, float, float, float], ...]:
    """(time, load, factor, floor) records of fits kept; malformed, non-finite or
    non-positive ones left out (status can be edited by hand)."""
    found: list[tuple[float, float, float, float]] = []
    for entry in entries if isinstance(entries, list) else []:
        try:
            record = (float(entry[0]), float(entry[1]), float(entry[2]), float(entry[3]))
        except (TypeError, ValueError, IndexError, OverflowError):
            continue
        if all(math.isfinite(x) for x in record) and record[1] >= 0 and min(record[2:]) > 0:
            found.append(record)
    return tuple(sorted(found))


def _positive_or_none(value: object) -> float | None:
    found = _float_or_none(value)
    return found if found is not None and 0 < found < math.inf else None


def _float_or_none(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


@dataclass(frozen=True, slots=True)
class Decision:
    """One evaluation's outcome: what to do, why, and from which signals.

    current_replicas: serving pods ready or starting before the actions.
    desired_replicas: the same count once the actions are applied.
    warm_pool: standby pods wanted (warm pool auto), None: keep the configured size.
    outran: the bursts that outran the ready pods (``gpuserve.autoscaling.outruns``);
        None where the rule did not look (no metrics, burst memory off).
    routed_around: serving pods to take out of routing while they clear their queues,
        deepest first (``gpuserve.autoscaling.shedding``); every other pod is routed to.
    """

    mode: Mode
    current_replicas: int
    desired_replicas: int
    actions: tuple[ClassAction, ...]
    reason: str
    memory: PolicyMemory
    signals: dict[str, float] = field(default_factory=dict)
    warm_pool: int | None = None
    outran: OutrunReport | None = None
    routed_around: tuple[RoutedAround, ...] = ()

    @property
    def delta(self) -> int:
        return self.desired_replicas - self.current_replicas

    @property
    def total(self) -> ClassAction:
        return added_up(self.actions)

    @property
    def promoted(self) -> int:
        return self.total.promote_warm

    @property
    def started(self) -> int:
        return self.total.start

    @property
    def removed(self) -> int:
        return self.total.remove
