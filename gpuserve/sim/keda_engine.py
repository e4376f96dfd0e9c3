"""`scaling.engine: keda` as gpuserve renders it, replayed: the ScaledObject's triggers
and HPA behaviour from ``gpuserve.resources.keda.keda_scaling``, the very numbers the
operator writes, so that `gpuserve simulate` predicts what a KEDA service gets.

KEDA serves each trigger's value to the HPA it creates as an external metric, read at
the HPA's 15-s sync; with several metrics the HPA takes the largest proposal. The
``keda`` peer of the benches is KEDA as a user sets it up by hand (a calibrated
threshold, stock behaviour); this one is gpuserve's own rendering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpuserve.resources.keda import KedaScaling
from gpuserve.sim.baselines import HpaBehaviour, HpaFed
from gpuserve.sim.scalers import ScalerView

RENDERED_KEDA: Final = "gpuserve-keda"  # the policy's name in `gpuserve simulate --policy`


@dataclass(kw_only=True)
class RenderedKeda(HpaFed):
    scaling: KedaScaling
    offset: float = 0.9
    name: str = RENDERED_KEDA

    def __post_init__(self) -> None:
        k = self.scaling
        self.behaviour = HpaBehaviour(
            self.min_replicas,
            self.max_replicas,
            down_window=k.down_window_s,
            up_pods=k.up_pods,
            up_percent=k.up_percent,
            down_percent=k.down_percent,
        )

    def usage(self, view: ScalerView) -> tuple[float | None, str]:
        k = self.scaling
        ready = max(view.pools.serving_ready, 1)
        rate = view.store.request_rate(view.now, k.rate_window_s, failures=False)
        ratios: list[float] = []
        if rate is not None:
            ratios.append(rate / (ready * k.rate_threshold))
        if k.queue_threshold is not None:
            scrape = view.store.latest_scrape(view.now)
            if scrape is not None:
                ratios.append(scrape.pending / (ready * k.queue_threshold))
        ratio = max(ratios) if ratios else None
        return ratio, f"keda (rendered): rate {rate}, usage ratio {ratio}"
