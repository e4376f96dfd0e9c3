"""An LLM policy priced by what the service's replicas were seen to do.

The engine parameters a policy starts from describe one model on one GPU (the defaults:
Llama 3 8B on an H100). A service runs some other model on some other class, so its
replicas' measured mean time per output token, at the load they carried, sets one factor
on every time cost (``capacity.time_scale``). Sizes (KV blocks, batch bounds) stay as the
spec says. Without a measurement (no traffic yet) the parameters are used as they are.

Each evaluation is priced at the fit of its own stable (60-s) window, because the fit
depends on the load it is taken at: a real engine has costs the model lacks, or in other
ratios (the emulator of e2e/test_llm_autoscaling.py, 3.4 times slower than modelled in
every cost, fits up to 7.5 saturated: its response sends add to each step), and sizing
needs the fit at the load it sizes for. A window in which requests waited or were
preempted keeps the factor last fitted: a queue stretches the steps beyond the model's
steady state, and its fit reads the engine as slower than it is. On the simulated
engine, which is the model's own, a steadier factor (the lower quartile of ten minutes
of 15-s fits, tried on cc0ee17) ran up to a third fewer GPU-hours, but held the demo's
LLM service at its low-load fit through a ramp: 76 % of streams within both objectives
where this gets 96 % (docs/bench-notes/llm-capacity.md, "2026-12-07 (later)").
"""

from __future__ import annotations

from dataclasses import replace

from gpuserve.autoscaling.decision import Decision, PolicyMemory
from gpuserve.autoscaling.pools import PoolState
from gpuserve.llm.capacity import time_scale
from gpuserve.llm.deciding import LLMPolicy, decide_llm
from gpuserve.llm.observing import Observation

# A factor outside these is a measurement gone wrong (a replica stalled, a clock jump),
# not a GPU: held within them.
SCALE_BOUNDS = (0.01, 100.0)


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


def contended(window: Observation) -> bool:
    """Whether requests waited or were preempted in ``window``: its steps were stretched
    by a queue the model's steady state does not have, and its fit reads the engine as
    slower than it is."""
    return window.waiting > 0 or window.preemptions > 0 or window.queue_growth > 0


def fit_or_known(
    policy: LLMPolicy,
    window: Observation | None,
    replicas: int,
    served_by: str | None,
    known: float | None,
) -> float | None:
    """``window``'s fit; ``known`` (the factor last fitted) where the window was contended
    or measured nothing, and one is known: an engine overloaded from its start is still
    priced, by its contended fit."""
    fit = fitted_scale(policy, window, replicas, served_by)
    if fit is None or window is None:
        return known
    return known if known is not None and contended(window) else fit


def scaled(policy: LLMPolicy, factor: float | None) -> LLMPolicy:
    """``policy`` with every class's engine time costs times ``factor`` (as is for None)."""
    if factor is None:
        return policy
    return replace(
        policy,
        params=policy.params.slower(factor),
        by_class={name: p.slower(factor) for name, p in policy.by_class.items()},
    )


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
    """``decide_llm`` on ``policy`` priced at the stable window's fit, and that factor
    (None where the window measured nothing; in the signals as ``timeScale``): the
    operator's pass and the simulator's scaler both decide by this. ``replicas``: the
    engines that reported at the window's end."""
    factor = fit_or_known(policy, stable, replicas, pools.most_serving, memory.time_scale)
    decision = decide_llm(
        policy=scaled(policy, factor),
        stable=stable,
        recent=recent,
        pools=pools,
        now=now,
        memory=replace(memory, time_scale=factor),
    )
    if factor is not None:
        decision.signals["timeScale"] = factor
    return decision, factor
