"""`scaling.engine: keda` for an LLM service as gpuserve renders it, replayed on the
token-level cluster: the ScaledObject's two triggers with the numbers the operator writes
(``gpuserve.resources.keda.llm_keda_scaling``), read at the HPA's 15-s sync, and the HPA
KEDA creates with the rendered behaviour (``gpuserve.sim.keda_engine.hpa_behaviour``).

The rate trigger's query reads arrivals (first tokens plus the waiting queue's growth over
the rate window) and the queue trigger the waiting requests: here both come from the
scrapes of that window, as ``window`` makes them for the other scalers. With several
triggers the HPA takes the largest proposal, which is the largest usage ratio's. Like the
operator, the replay sizes the thresholds again for the token mix it measures
(``gpuserve.llm.keda_mix``): at every sync, from the scrapes of the stable window, as the
operator's pass records it and the reconcile re-renders the ScaledObject, with the
engines priced at the time scale the replicas measure (``gpuserve.llm.calibrating``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.llm.calibrating import fit_or_known
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.keda_mix import KedaTokenMix, measure_mix, sized_for
from gpuserve.resources.keda import KedaScaling, llm_keda_scaling
from gpuserve.sim.baselines import HpaBehaviour
from gpuserve.sim.keda_engine import RENDERED_KEDA, hpa_behaviour
from gpuserve.sim.llm.cluster import ClusterScaler, ClusterView
from gpuserve.sim.llm.scalers import window

# The operator's stable window of vLLM series (the LLM rule's and the measurement's).
STABLE_WINDOW_S = 60.0


@dataclass(frozen=True, slots=True)
class KedaReplay:
    """What the replay needs beyond the LLM policy: the spec's scaling fields (windows,
    step limits, targetQueueDepth), the class the ScaledObject targets, and whether the
    thresholds follow the measured mix (False: as first rendered, a what-if)."""

    config: PolicyConfig
    class_name: str
    calibrate: bool = True


@dataclass
class RenderedKedaLLM(ClusterScaler):
    """The HPA behind an LLM service's rendered ScaledObject."""

    policy: LLMPolicy
    replay: KedaReplay
    name: str = RENDERED_KEDA
    interval_s: float = 15.0
    offset_s: float = 0.9
    scaling: KedaScaling = field(init=False)
    behaviour: HpaBehaviour = field(init=False)
    mix: KedaTokenMix | None = field(init=False, default=None)
    # (time, mix) each time the thresholds were sized again, for the report.
    mixes: list[tuple[float, KedaTokenMix]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.scaling = self._render()
        p = self.policy
        self.behaviour = hpa_behaviour(self.scaling, p.min_replicas, p.max_replicas)

    def _render(self) -> KedaScaling:
        r = self.replay
        return llm_keda_scaling(r.config, sized_for(self.policy, self.mix), r.class_name)

    def usage(self, view: ClusterView) -> float | None:
        """The larger trigger's value over its threshold for the ready replicas (KEDA's
        AverageValue); None before two scrapes (the metric is not there yet)."""
        k = self.scaling
        seen = window(view, k.rate_window_s, self.policy.objectives.quantile)
        if seen is None:
            return None
        ready = max(view.serving, 1)
        ratio = seen.arrival_rate / (ready * k.rate_threshold)
        if k.queue_threshold is not None:
            ratio = max(ratio, seen.waiting / (ready * k.queue_threshold))
        return ratio

    def target(self, view: ClusterView) -> int | None:
        if self.replay.calibrate:
            self._calibrate(view)
        return self.behaviour.next_size(
            now=view.now, current=view.committed, ready=view.serving, usage_ratio=self.usage(view)
        )

    def _calibrate(self, view: ClusterView) -> None:
        stable = window(view, STABLE_WINDOW_S, self.policy.objectives.quantile)
        class_name = self.replay.class_name
        replicas = view.snapshots[-1].replicas if view.snapshots else 0
        known = self.mix.time_scale if self.mix is not None else None
        factor = fit_or_known(self.policy, stable, replicas, class_name, known)
        new = measure_mix(
            self.mix,
            stable,
            serving_ready=view.serving,
            policy=self.policy,
            class_name=class_name,
            time_scale=factor,
        )
        if new is None:
            return
        self.mix = new
        self.mixes.append((view.now, new))
        self.scaling = self._render()
