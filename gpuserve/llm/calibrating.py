"""An LLM policy priced by what the service's replicas were seen to do.

The engine parameters a policy starts from describe one model on one GPU (the defaults:
Llama 3 8B on an H100). A service runs some other model on some other class, so its
replicas' measured mean time per output token, at the load they carried, sets one factor
on every time cost (``capacity.time_scale``). Sizes (KV blocks, batch bounds) stay as the
spec says. Without a measurement (no traffic yet) the parameters are used as they are.

One window's fit is noisy, and biased one way: the model's mean step is the engine's under
steady load, and contention only lengthens what is measured (a burst queued in the batch,
decodes beside a long prompt's chunks, an engine idle between long requests), so it reads
as a slower GPU. A window that mixes a burst with idle seconds reads slowest of all: the
mean step of a load that comes and goes is longer than that of its mean load. So the fit
is taken on the recent (15-s) window, whose load is nearly even, not the minute: on the
simulated engine, which is the model's own, the 15-s fits run 0.97-1.03 on Azure's chat
mix (tenth to ninetieth percentile) and 1.00-1.96 on bursty traffic, the minute's
0.99-1.09 and 1.01-2.40 (``bench/llm_time_scale.py``). The factor is a property of the
model and the GPU, not of the moment: each evaluation's fit is kept per minute over
``SCALE_MEMORY_S`` (``PolicyMemory.time_scales``), and the policy is priced at the lower
quartile of the minutes' geometric means, the near side of that one-sided spread, which
one or two misfit minutes do not move. Pricing each evaluation at its own minute's fit,
as before 2026-12-07, held the need of the worst minute for a whole scale-down window.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpuserve.autoscaling.bursts import kept_minutes
from gpuserve.autoscaling.decision import Decision, PolicyMemory
from gpuserve.autoscaling.pools import PoolState
from gpuserve.llm.capacity import time_scale
from gpuserve.llm.deciding import LLMPolicy, decide_llm
from gpuserve.llm.observing import Observation

# A factor outside these is a measurement gone wrong (a replica stalled, a clock jump),
# not a GPU: held within them.
SCALE_BOUNDS = (0.01, 100.0)
# Ten minutes of fits: enough minutes that a few misfits are outvoted; a rollout to a
# slower model or GPU takes the lower quartile over within eight, a faster one within three.
SCALE_MEMORY_S = 600.0

# (minute start, sum of the evaluations' log factors, evaluations)
ScaleMinutes = tuple[tuple[float, float, int], ...]


def fitted_scale(
    policy: LLMPolicy, window: Observation | None, replicas: int, served_by: str | None = None
) -> float | None:
    """The factor on ``policy``'s time costs that ``window`` (served by ``replicas``
    replicas, most of them of class ``served_by``) measures, within ``SCALE_BOUNDS``; None
    when the window measured nothing. It is measured against the engine of the class that
    served and applies to every class's engine: what the datasheet-derived engines got
    wrong about this model is taken to hold on each."""
    if window is None or window.shape is None or window.tpot_mean_s is None or replicas < 1:
        return None
    reference = policy.params if served_by is None else policy.params_for(served_by)
    factor = time_scale(reference, window.shape, window.rate / replicas, window.tpot_mean_s)
    if factor is None:
        return None
    return min(max(factor, SCALE_BOUNDS[0]), SCALE_BOUNDS[1])


def scaled(policy: LLMPolicy, factor: float | None) -> LLMPolicy:
    """``policy`` with every class's engine time costs times ``factor`` (as is for None)."""
    if factor is None:
        return policy
    return replace(
        policy,
        params=policy.params.slower(factor),
        by_class={name: p.slower(factor) for name, p in policy.by_class.items()},
    )


def remember_scale(
    minutes: ScaleMinutes, now: float, factor: float | None, *, memory_s: float = SCALE_MEMORY_S
) -> ScaleMinutes:
    """Add ``factor`` to the minute in progress; minutes older than ``memory_s`` go."""
    kept, in_progress = kept_minutes(minutes, now, memory_s)
    if factor is None or not factor > 0:
        return tuple(kept)
    if in_progress:
        start, total, count = kept[-1]
        kept[-1] = (start, total + math.log(factor), count + 1)
    else:
        kept.append((now, math.log(factor), 1))
    return tuple(kept)


def measured_scale(minutes: ScaleMinutes) -> float | None:
    """The geometric mean factor of the newest minute that has one (the minute in
    progress too: the factor of a service's first minute is all there is); None before
    any fit."""
    means = [total / count for _, total, count in minutes if count > 0]
    return math.exp(means[-1]) if means else None


def contended(window: Observation) -> bool:
    """Whether requests waited or were preempted in ``window``: its steps were stretched
    by a queue the model's steady state does not have."""
    return window.waiting > 0 or window.preemptions > 0


def remember_fit(
    minutes: ScaleMinutes,
    now: float,
    policy: LLMPolicy,
    window: Observation | None,
    replicas: int,
    served_by: str | None,
) -> tuple[ScaleMinutes, float | None]:
    """``window``'s fit added to ``minutes``, and the factor they measure now (None before
    any fit): the builtin engine's pricing and a KEDA service's thresholds follow this. A
    contended window's fit is kept only while no other is known: an engine overloaded
    from its start must still be priced."""
    fit = fitted_scale(policy, window, replicas, served_by)
    known = any(count > 0 for _, _, count in minutes)
    if fit is not None and window is not None and contended(window) and known:
        fit = None
    kept = remember_scale(minutes, now, fit)
    return kept, measured_scale(kept)


def decide_priced(
    *,
    policy: LLMPolicy,
    stable: Observation | None,
    recent: Observation | None,
    pools: PoolState,
    now: float,
    memory: PolicyMemory,
    replicas: int,
) -> tuple[Decision, float | None]:
    """``decide_llm`` on ``policy`` priced at the measured factor (the recent window's fit
    added to the memory first), and that factor: the operator's pass and the simulator's
    scaler both decide by this. ``replicas``: the engines that reported at the window's
    end."""
    scales, factor = remember_fit(
        memory.time_scales, now, policy, recent, replicas, pools.most_serving
    )
    decision = decide_llm(
        policy=scaled(policy, factor),
        stable=stable,
        recent=recent,
        pools=pools,
        now=now,
        memory=replace(memory, time_scales=scales),
    )
    return decision, factor
