"""`scaling.engine: keda` for an LLM service as gpuserve renders it, replayed on the
token-level cluster: the ScaledObject's two triggers with the numbers the operator writes
(``gpuserve.resources.keda.llm_keda_scaling``), read at the HPA's 15-s sync, and the HPA
KEDA creates with the rendered behaviour (``gpuserve.sim.keda_engine.hpa_behaviour``).

The rate trigger's query reads arrivals (first tokens plus the waiting queue's growth over
the rate window) and the queue trigger the waiting requests: here both come from the
scrapes of that window, as ``window`` makes them for the other scalers. With several
triggers the HPA takes the largest proposal, which is the largest usage ratio's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuserve.resources.keda import KedaScaling
from gpuserve.sim.baselines import HpaBehaviour
from gpuserve.sim.keda_engine import RENDERED_KEDA, hpa_behaviour
from gpuserve.sim.llm.cluster import ClusterScaler, ClusterView
from gpuserve.sim.llm.scalers import window


@dataclass
class RenderedKedaLLM(ClusterScaler):
    """The HPA behind an LLM service's rendered ScaledObject."""

    scaling: KedaScaling
    min_replicas: int
    max_replicas: int
    quantile: float  # the objectives' (the window's histograms are read at it)
    name: str = RENDERED_KEDA
    interval_s: float = 15.0
    offset_s: float = 0.9
    behaviour: HpaBehaviour = field(init=False)

    def __post_init__(self) -> None:
        self.behaviour = hpa_behaviour(self.scaling, self.min_replicas, self.max_replicas)

    def usage(self, view: ClusterView) -> float | None:
        """The larger trigger's value over its threshold for the ready replicas (KEDA's
        AverageValue); None before two scrapes (the metric is not there yet)."""
        k = self.scaling
        seen = window(view, k.rate_window_s, self.quantile)
        if seen is None:
            return None
        ready = max(view.serving, 1)
        ratio = seen.arrival_rate / (ready * k.rate_threshold)
        if k.queue_threshold is not None:
            ratio = max(ratio, seen.waiting / (ready * k.queue_threshold))
        return ratio

    def target(self, view: ClusterView) -> int | None:
        return self.behaviour.next_size(
            now=view.now, current=view.committed, ready=view.serving, usage_ratio=self.usage(view)
        )
