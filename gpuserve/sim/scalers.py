"""The contract between the simulator and an autoscaler, and gpuserve's policy behind it.

The simulator calls ``step`` every ``interval`` seconds with what a controller could see
at that moment (Prometheus samples, pod counts) and applies the returned order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gpuserve.autoscaling.allocating import allocate
from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.autoscaling.deciding import decide
from gpuserve.autoscaling.decision import ClassAction, Decision, PolicyMemory
from gpuserve.autoscaling.pools import PoolState
from gpuserve.autoscaling.shedding import PodQueue
from gpuserve.sim.scraping import MetricStore


@dataclass(frozen=True, slots=True)
class ScalerView:
    now: float
    pools: PoolState
    store: MetricStore
    history_span: float
    queues: tuple[PodQueue, ...] = ()  # the ready serving pods' queues, as last scraped


@dataclass(frozen=True, slots=True)
class ScaleOrder:
    """Per-class actions; ``instant`` makes new pods ready at once (the oracle only);
    ``warm_pool``: the standby pods the policy wants from now on (None: unchanged);
    ``routed_around``: ready pods (``ScalerView.queues``' names) arrivals avoid until the
    next order."""

    actions: tuple[ClassAction, ...] = ()
    reason: str = ""
    instant: bool = False
    warm_pool: int | None = None
    routed_around: tuple[str, ...] = ()  # ready pods to route around until the next order

    @property
    def changes(self) -> bool:
        return any(a.promote_warm or a.start or a.remove for a in self.actions)


class Scaler(Protocol):
    name: str
    interval: float
    offset: float

    def step(self, view: ScalerView) -> ScaleOrder: ...


@dataclass
class HoldScaler:
    """Never scales: the pool stays as the simulation starts it (calibration runs, the
    oracle's per-size probes, tests of the serving model alone)."""

    name: str = "hold"
    interval: float = 1e9
    offset: float = 1e9

    def step(self, view: ScalerView) -> ScaleOrder:
        return ScaleOrder()


def resize_to(pools: PoolState, target: int, *, reason: str, instant: bool = False) -> ScaleOrder:
    """A Deployment-style resize with the operator's placement rule (new pods in preference
    order within free capacity, removals from the least preferred class). No warm pool:
    peers keep none."""
    actions, _ = allocate(pools, target, use_warm=False)
    return ScaleOrder(actions, reason, instant)


@dataclass
class GpuserveScaler:
    """gpuserve's policy, called exactly as the operator's autoscaler controller calls it:
    history from Prometheus, pool state, the clock, and the memory kept in status."""

    config: PolicyConfig
    interval: float = 5.0
    offset: float = 0.5
    name: str = "gpuserve"
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    decisions: list[tuple[float, Decision]] = field(default_factory=list)
    keep_decisions: bool = False

    def step(self, view: ScalerView) -> ScaleOrder:
        decision = decide(
            config=self.config,
            history=view.store.history(view.now, view.history_span),
            pools=view.pools,
            now=view.now,
            memory=self.memory,
            queues=view.queues,
        )
        self.memory = decision.memory
        if self.keep_decisions:
            self.decisions.append((view.now, decision))
        return ScaleOrder(
            decision.actions,
            decision.reason,
            warm_pool=decision.warm_pool,
            routed_around=tuple(r.pod for r in decision.routed_around),
        )
