"""The simulator places pods by the operator's plan: same service, classes and capacity,
same pods per class (serving and warm)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from e2e.invalid_cases import valid_service
from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.placement.planning import ClassCapacity, PoolNow, plan_pools, usable_classes
from gpuserve.sim.baselines import StaticPeak
from gpuserve.sim.from_spec import sim_config_from_spec
from gpuserve.sim.simulating import Simulation
from gpuserve.sim.workload import poisson_workload

CLASSES = {
    name: AcceleratorClassSpec.model_validate(
        {"gpuProduct": f"GPU-{name}", "computeCapability": "9.0", "relativeSpeed": speed}
    )
    for name, speed in (("h100", 3.0), ("a100", 2.0), ("l4", 1.0))
}


def _spec(warm_pool: int) -> InferenceServiceSpec:
    body = valid_service()["spec"]
    body.update(
        accelerators={"classes": ["h100", "ghost", "a100", "l4"]},
        scaling={"minReplicas": 1, "maxReplicas": 40, "warmPool": warm_pool},
    )
    return InferenceServiceSpec.model_validate(body)


def _simulated(
    spec: InferenceServiceSpec, order: list[str], capacity: dict[str, int], start: int, end: int
) -> tuple[dict[str, int], dict[str, int]]:
    """Pods per class (serving, warm) after the simulator starts at ``start`` serving pods
    and a static scaler moves it to ``end``."""
    config = sim_config_from_spec(
        spec=spec.model_copy(
            update={"accelerators": spec.accelerators.model_copy(update={"classes": order})}
        ),
        classes=CLASSES,
        capacity=capacity,
    )
    config = replace(config, initial_replicas=start)
    sim = Simulation(
        config=config,
        workload=poisson_workload(rate=1.0, duration=120.0, seed=3),
        scaler=StaticPeak(replicas=end, offset=1.0),
    )
    sim.run()
    alive = [p for p in sim.pods if p.gone == float("inf")]
    names = [pool.name for pool in config.classes]
    serving = Counter(names[p.cls] for p in alive if p.role == 0)
    warm = Counter(names[p.cls] for p in alive if p.role != 0)
    return {c: serving[c] for c in names}, {c: warm[c] for c in names}


@pytest.mark.parametrize(
    ("capacity", "warm_pool", "end"),
    [
        ({"h100": 2, "a100": 3, "l4": 8}, 0, 4),  # spills from h100 into a100
        ({"h100": 2, "a100": 3, "l4": 8}, 2, 6),  # warm pool on what serving leaves
        ({"h100": 8, "a100": 1, "l4": 1}, 3, 3),  # everything fits the first class
        ({"h100": 1, "a100": 1, "l4": 2}, 2, 4),  # warm pool short: nothing left for it
        ({"h100": 1, "a100": 0, "l4": 20}, 1, 12),
    ],
)
def test_simulator_and_operator_place_the_same_pods(
    capacity: dict[str, int], warm_pool: int, end: int
) -> None:
    spec = _spec(warm_pool)
    order, issues = usable_classes(spec, CLASSES)
    assert order == ["h100", "a100", "l4"] and [i.class_name for i in issues] == ["ghost"]
    serving, warm = _simulated(spec, order, capacity, start=1, end=end)
    # The operator's plan from the state the simulator started in: one serving pod in the
    # most preferred class and the warm pool placed as the operator placed it at start.
    _, warm_at_start = _simulated(spec, order, capacity, start=1, end=1)
    serving_now = {order[0]: PoolNow(scheduled=1)}
    standby_now = {c: PoolNow(scheduled=n) for c, n in warm_at_start.items()}
    free = {
        c: ClassCapacity(free=capacity[c] - (c == order[0]) - warm_at_start[c], total=capacity[c])
        for c in order
    }
    plan = plan_pools(
        desired=end,
        warm_pool=warm_pool,
        order=order,
        serving_now=serving_now,
        standby_now=standby_now,
        standby_serving={},
        capacity=free,
    )
    assert serving == plan.serving
    assert warm == plan.standby
