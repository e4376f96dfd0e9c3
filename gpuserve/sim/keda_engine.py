"""`scaling.engine: keda` as gpuserve renders it, replayed: the ScaledObject's triggers
and HPA behaviour from ``gpuserve.resources.keda.keda_scaling``, the very numbers the
operator writes, so that `gpuserve simulate` predicts what a KEDA service gets.

KEDA serves each trigger's value to the HPA it creates as an external metric, read at
the HPA's 15-s sync; with several metrics the HPA takes the largest proposal. The
``keda`` peer of the benches is KEDA as a user sets it up by hand (a calibrated
threshold, stock behaviour); this one is gpuserve's own rendering, and like the operator
it sizes the threshold again when Triton's compute time contradicts the spec
(``gpuserve.autoscaling.keda_calibration``): at every sync, from the scrapes of the stable
window, as the operator's pass records it and the reconcile re-renders the ScaledObject.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from gpuserve.api.models import AcceleratorClassSpec
from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.autoscaling.keda_calibration import KedaCalibration, calibrate_from
from gpuserve.resources.keda import KedaScaling, keda_scaling
from gpuserve.sim.baselines import HpaBehaviour, HpaFed
from gpuserve.sim.scalers import ScalerView

RENDERED_KEDA: Final = "gpuserve-keda"  # the policy's name in `gpuserve simulate --policy`


def hpa_behaviour(k: KedaScaling, min_replicas: int, max_replicas: int) -> HpaBehaviour:
    """The HPA KEDA creates for the ScaledObject: its rendered behaviour, within the
    service's bounds."""
    return HpaBehaviour(
        min_replicas,
        max_replicas,
        down_window=k.down_window_s,
        up_pods=k.up_pods,
        up_percent=k.up_percent,
        down_percent=k.down_percent,
    )


@dataclass(kw_only=True)
class RenderedKeda(HpaFed):
    policy: PolicyConfig  # the spec's, with its stated service times
    accel: AcceleratorClassSpec  # the class the ScaledObject sizes
    scrape_interval: float
    offset: float = 0.9
    name: str = RENDERED_KEDA
    calibrate: bool = True  # False: the threshold as first rendered (a what-if)
    scaling: KedaScaling = field(init=False)
    calibration: KedaCalibration | None = field(init=False, default=None)
    # (time, calibration) each time the threshold was sized again, for the report.
    calibrations: list[tuple[float, KedaCalibration]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.scaling = keda_scaling(self.policy, self.accel, self.scrape_interval)
        self.behaviour = hpa_behaviour(self.scaling, self.min_replicas, self.max_replicas)

    def usage(self, view: ScalerView) -> tuple[float | None, str]:
        if self.calibrate:
            self._calibrate(view)
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

    def _calibrate(self, view: ScalerView) -> None:
        window = self.policy.stable_window
        stable = view.store.history(view.now, window).samples
        new = calibrate_from(self.calibration, stable, view.pools, self.policy.profile)
        if new is None:
            return
        self.calibration = new
        self.calibrations.append((view.now, new))
        self.scaling = keda_scaling(self.policy, self.accel, self.scrape_interval, new.scale)
