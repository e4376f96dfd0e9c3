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
steady state, and its fit reads the engine as slower than it is.

One window's fit is noisy (a minute of arrivals, a mix that moves), and the scale-down
hold keeps the need of the highest. So one fit a minute is kept (``FIT_EVERY_S``) for
``FIT_MEMORY_S``, with the load it was taken at (the model's share of an engine's time,
``load_of``), and an uncontended window is priced at the median of its own fit and those
kept within ``FIT_LOAD_BAND`` of its load, when there are ``FIT_NEIGHBOURS``
(``steadied``). A load not seen before is priced by its own window: the lower quartile
of ten minutes of fits (cc0ee17) held the demo's LLM service at its lightly loaded fit
through a ramp, 76 % of streams within both objectives where this gets 95 %.

A fit divides the window's rate by the engines that served it, on average over the window
(``engines_in``; the operator counts the pods with a TTFT histogram whose target is not a
warm standby). Counted at the window's end, the minute after each scale-up read the
engines as slower than they are, at a load lower than theirs.

One factor fitted from the decode steps prices the prompts as it prices the steps. Where
a GPU computes prompts slower than that says, time to first token is under-priced. So
each kept minute also measures a floor on the prompts' costs (``prefill_floor``): the
factor, at least 1, beyond the fitted one at which the model's TTFT at the objective's
quantile reaches the measured one. The decision takes the median over every kept minute:
it stands for the GPU, not for a load, and a minute's TTFT quantile is a few requests'.
On its own engine the model's TTFT errs high, so the floor stays 1 there. The same floor
from the TPOT quantile was tried and dropped: the model's TPOT quantile errs low on its
own engine, and that floor read 5.4 there.

While the rule holds burst headroom for the service (``bursting``), each window is
priced by its own fit, none is kept and no floor is taken: a minute with a burst in it,
or its tail, is not at the load its mean says, and its fit and TTFT price that burst.
Steadied, three of the simulator's four bursty rows lost 4-10 points within both
objectives. Figures: docs/bench-notes/llm-capacity.md, "2026-12-07 (later)" and
"(last)".
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from gpuserve.autoscaling.bursts import burst_headroom
from gpuserve.autoscaling.decision import Decision, PolicyMemory
from gpuserve.autoscaling.pools import PoolState
from gpuserve.llm.capacity import predict, request_work_s, time_scale
from gpuserve.llm.deciding import LLMPolicy, decide_llm
from gpuserve.llm.observing import Observation
from gpuserve.llm.params import EngineParams

# A factor outside these is a measurement gone wrong (a replica stalled, a clock jump),
# not a GPU: held within them.
SCALE_BOUNDS = (0.01, 100.0)
FIT_EVERY_S = 60.0  # the stable window's length: kept fits share few requests
FIT_MEMORY_S = 1200.0
# Loads (shares of an engine's time) this close are priced alike: the e2e emulator's fit,
# which grows most with load (3.4 light, 7.5 saturated), moves 5-10 % across such a band.
FIT_LOAD_BAND = 0.05
FIT_NEIGHBOURS = 3
# The floor on the prompts' costs: raised only (the module docstring), and not past what
# a measurement gone wrong would read.
PREFILL_BOUNDS = (1.0, 100.0)
_BISECTIONS = 30  # halvings of the bounds' log-ratio: a fraction of a percent

# (time taken, load, factor, prefill floor) of one kept fit
KeptFit = tuple[float, float, float, float]
# (factor on every time cost, floor on the prompts' costs beyond it)
Price = tuple[float, float]


def fitted_scale(
    policy: LLMPolicy, window: Observation | None, replicas: int, served_by: str | None = None
) -> float | None:
    """The factor on ``policy``'s time costs that ``window`` (served by the engines
    ``engines_in`` counts, ``replicas`` of them at its end, most of class ``served_by``)
    measures, within ``SCALE_BOUNDS``; None when the window measured nothing. It is
    measured against the engine of the class that served and applies to every class's
    engine: what the datasheet-derived engines got wrong about this model is taken to
    hold on each."""
    if window is None or window.shape is None or window.tpot_mean_s is None:
        return None
    engines = engines_in(window, replicas)
    if engines is None:
        return None
    reference = _reference(policy, served_by)
    factor = time_scale(reference, window.shape, window.rate / engines, window.tpot_mean_s)
    return None if factor is None else bounded(factor)


def engines_in(window: Observation, replicas: int) -> float | None:
    """The engines that served ``window``'s requests: the mean over the window where it
    was measured, else ``replicas``, those reporting at its end; None for none.
    Counted at the end alone, an engine that joined within the window counts as one that
    served all of it, and the rate per engine reads low by its share: the minute after a
    scale-up fitted the engines as slower than they are, and that fit was kept at the low
    load it seemed to be taken at."""
    engines = window.engines if window.engines is not None else float(replicas)
    return engines if engines > 0 else None


def bounded(factor: float, bounds: tuple[float, float] = SCALE_BOUNDS) -> float | None:
    """``factor`` held within ``bounds``; None for one that is no number (status can be
    edited by hand)."""
    if math.isnan(factor):
        return None
    return min(max(factor, bounds[0]), bounds[1])


def load_of(
    policy: LLMPolicy, window: Observation, replicas: int, served_by: str | None = None
) -> float | None:
    """The share of one replica's engine time ``window``'s requests take in the model
    (``r w``, before any factor); None when the window measured no mix."""
    engines = engines_in(window, replicas)
    if window.shape is None or engines is None:
        return None
    return window.rate / engines * request_work_s(_reference(policy, served_by), window.shape)


def _reference(policy: LLMPolicy, served_by: str | None) -> EngineParams:
    """The engine a fit is measured against: that of the class that served."""
    return policy.params if served_by is None else policy.params_for(served_by)


def prefill_floor(
    priced: LLMPolicy, window: Observation, replicas: int, served_by: str | None = None
) -> float:
    """The factor within ``PREFILL_BOUNDS`` on ``priced``'s prompt costs at which the
    model's time to first token at the objective's quantile, at ``window``'s rate per
    replica, reaches the one ``window`` measured; 1 where the window measured none, or
    the model already predicts as long."""
    engines = engines_in(window, replicas)
    if window.shape is None or window.ttft_high_s is None or engines is None:
        return 1.0
    params, shape, measured = _reference(priced, served_by), window.shape, window.ttft_high_s
    q, rate = priced.objectives.quantile, window.rate / engines

    def short(prefill: float) -> bool:
        return predict(params.slower(1.0, prefill=prefill), shape, q, rate).ttft_s < measured

    low, high = PREFILL_BOUNDS
    if not short(low):
        return low
    if short(high):
        return high
    for _ in range(_BISECTIONS):
        mid = math.sqrt(low * high)
        low, high = (mid, high) if short(mid) else (low, mid)
    return high


def bursting(policy: LLMPolicy, window: Observation, memory: PolicyMemory) -> bool:
    """Whether the rule holds burst headroom for the service at ``window``'s rate: a
    minute of its traffic may hold a burst, or a burst's tail, and its fits price those
    (the module docstring)."""
    q = policy.objectives.quantile
    return burst_headroom(memory.surges, policy.startup_s, window.arrival_rate, quantile=q) > 0


def steadied(fit: Price, load: float, kept: tuple[KeptFit, ...]) -> Price:
    """The factor: the median of ``fit``'s and those of the kept fits taken within
    ``FIT_LOAD_BAND`` of ``load``, where there are ``FIT_NEIGHBOURS`` of them. The floor:
    the median of ``fit``'s and every kept one's, where there are as many: it stands for
    how the GPU computes prompts against decode steps, not for a load, and one window's
    TTFT quantile is a few requests'. ``fit``'s own part otherwise."""
    near = [f for _, at_load, f, _ in kept if abs(at_load - load) <= FIT_LOAD_BAND]
    factor = statistics.median([fit[0], *near]) if len(near) >= FIT_NEIGHBOURS else fit[0]
    floors = [p for *_, p in kept]
    floor = statistics.median([fit[1], *floors]) if len(floors) >= FIT_NEIGHBOURS else fit[1]
    return factor, floor


def kept_after(
    kept: tuple[KeptFit, ...], now: float, fit: Price | None, load: float | None
) -> tuple[KeptFit, ...]:
    """``kept`` less the fits older than ``FIT_MEMORY_S``, with ``fit`` (at ``load``)
    added when none was kept in the last ``FIT_EVERY_S``."""
    recent = tuple(entry for entry in kept if now - FIT_MEMORY_S < entry[0] <= now)
    if fit is None or load is None or (recent and now - recent[-1][0] < FIT_EVERY_S):
        return recent
    return (*recent, (now, load, *fit))


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
    return _fit_or_known(fitted_scale(policy, window, replicas, served_by), window, known)


def _fit_or_known(
    fit: float | None, window: Observation | None, known: float | None
) -> float | None:
    """``fit_or_known`` on ``window``'s fit, taken already."""
    known = None if known is None else bounded(known)
    if fit is None or window is None:
        return known
    return known if known is not None and contended(window) else fit


def scaled(policy: LLMPolicy, factor: float | None, prefill: float = 1.0) -> LLMPolicy:
    """``policy`` with every class's engine time costs times ``factor`` (as is for None),
    and the prompts' costs times ``prefill`` beyond it."""
    if factor is None:
        return policy
    return replace(
        policy,
        params=policy.params.slower(factor, prefill=prefill),
        by_class={n: p.slower(factor, prefill=prefill) for n, p in policy.by_class.items()},
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
    pooled: Observation | None = None,
) -> tuple[Decision, float | None]:
    """``decide_llm`` on ``policy`` priced at the stable window's fit and floor on the
    prompts' costs, steadied by those kept at like loads, and that factor (None where the
    window measured nothing; in the signals as ``timeScale``, the floor as
    ``prefillScale``, the engines the fit divides by as ``engines``): the operator's
    pass and the simulator's scaler both decide by this. ``replicas``: the engines that
    reported at the window's end (``engines_in``); ``pooled``: the
    last ten minutes of traffic, whose mix is sized for unless the stable
    window's moved (the fit and the floor are the stable window's own: they measure the
    work done in it)."""
    served_by = pools.most_serving
    fit = fitted_scale(policy, stable, replicas, served_by)
    bursty = stable is not None and bursting(policy, stable, memory)
    load = None
    if fit is not None and stable is not None and not bursty and not contended(stable):
        load = load_of(policy, stable, replicas, served_by)
    factor: float | None
    if fit is not None and load is not None and stable is not None:
        own = (fit, prefill_floor(scaled(policy, fit), stable, replicas, served_by))
        factor, prefill = steadied(own, load, memory.time_fits)
        kept = kept_after(memory.time_fits, now, own, load)
    else:
        factor = _fit_or_known(fit, stable, memory.time_scale)
        floor = memory.prefill_scale
        known = None if floor is None else bounded(floor, PREFILL_BOUNDS)
        # A bursty minute's TTFT prices its bursts' queues, not the prompts: no floor.
        prefill = 1.0 if bursty or known is None else known
        kept = kept_after(memory.time_fits, now, None, None)
    decision = decide_llm(
        policy=scaled(policy, factor, prefill),
        stable=stable,
        recent=recent,
        pools=pools,
        now=now,
        memory=replace(memory, time_scale=factor, prefill_scale=prefill, time_fits=kept),
        pooled=pooled,
    )
    if factor is not None:
        decision.signals["timeScale"] = factor
        decision.signals["prefillScale"] = prefill
    engines = None if stable is None else engines_in(stable, replicas)
    if engines is not None:
        decision.signals["engines"] = engines  # what the stable window's fit divides by
    return decision, factor
