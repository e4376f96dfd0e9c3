"""The autoscaling policy, pure: (config, metric history, pools, now, memory) -> Decision."""

from gpuserve.autoscaling.capacity import CapacityEstimate, replica_capacity
from gpuserve.autoscaling.config import PolicyConfig, ServiceProfile
from gpuserve.autoscaling.deciding import decide
from gpuserve.autoscaling.decision import ClassAction, Decision, PolicyMemory
from gpuserve.autoscaling.metrics import MetricHistory, MetricSample
from gpuserve.autoscaling.pools import ClassPool, PoolState

__all__ = [
    "CapacityEstimate",
    "ClassAction",
    "ClassPool",
    "Decision",
    "MetricHistory",
    "MetricSample",
    "PolicyConfig",
    "PolicyMemory",
    "PoolState",
    "ServiceProfile",
    "decide",
    "replica_capacity",
]
