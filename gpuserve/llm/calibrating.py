"""An LLM policy priced by what the service's replicas were seen to do.

The engine parameters a policy starts from describe one model on one GPU (the defaults:
Llama 3 8B on an H100). A service runs some other model on some other class, so its
replicas' measured mean time per output token, at the load they carried, sets one factor
on every time cost (``capacity.time_scale``). Sizes (KV blocks, batch bounds) stay as the
spec says. Without a measurement (no traffic yet) the parameters are used as they are.
"""

from __future__ import annotations

from dataclasses import replace

from gpuserve.llm.capacity import time_scale
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.observing import Observation

# A factor outside these is a measurement gone wrong (a replica stalled, a clock jump),
# not a GPU: held within them.
SCALE_BOUNDS = (0.01, 100.0)


def calibrated(
    policy: LLMPolicy, window: Observation | None, replicas: int, served_by: str | None = None
) -> tuple[LLMPolicy, float | None]:
    """``policy`` with its engines' time costs fitted to ``window`` (served by
    ``replicas`` replicas, most of them of class ``served_by``), and the factor used; the
    policy unchanged and None when the window measured nothing. The factor is measured
    against the engine of the class that served, and applied to every class's engine: what
    the datasheet-derived engines got wrong about this model is taken to hold on each."""
    if window is None or window.shape is None or window.tpot_mean_s is None or replicas < 1:
        return policy, None
    reference = policy.params if served_by is None else policy.params_for(served_by)
    factor = time_scale(reference, window.shape, window.rate / replicas, window.tpot_mean_s)
    if factor is None:
        return policy, None
    factor = min(max(factor, SCALE_BOUNDS[0]), SCALE_BOUNDS[1])
    return (
        replace(
            policy,
            params=policy.params.slower(factor),
            by_class={name: p.slower(factor) for name, p in policy.by_class.items()},
        ),
        factor,
    )
