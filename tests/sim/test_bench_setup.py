"""The benchmarks' simulated service (gpuserve.sim.comparing.Setup)."""

from __future__ import annotations

from dataclasses import replace

from gpuserve.api.durations import parse_duration
from gpuserve.api.models import ScalingSpec
from gpuserve.sim.comparing import Setup
from gpuserve.sim.scalers import GpuserveScaler
from gpuserve.sim.simulating import simulate
from gpuserve.sim.workload import rate_profile_workload


def _gpu_hours(setup: Setup) -> float:
    # Steady, a busy two minutes, then quiet: the busy stretch's pods go once the scale-down
    # window has passed over it.
    workload = rate_profile_workload(rates=[(180.0, 4.0), (120.0, 30.0), (300.0, 4.0)], seed=3)
    config = replace(setup.sim_config(seed=3), measure_from=0.0, initial_replicas=1)
    scaler = GpuserveScaler(config=replace(setup.policy(), burst_memory=0.0))
    return simulate(config=config, workload=workload, scaler=scaler).gpu_hours


def test_the_setup_holds_a_scale_down_for_the_window_it_is_given() -> None:
    assert _gpu_hours(Setup(scale_down_window=45.0)) < _gpu_hours(Setup())


def test_the_setup_defaults_to_the_apis_scale_down_stabilisation() -> None:
    # The benches run the policy a spec with default scaling fields gets.
    spec_default = parse_duration(ScalingSpec().scale_down_stabilization)
    assert Setup().policy().scale_down_window == spec_default
