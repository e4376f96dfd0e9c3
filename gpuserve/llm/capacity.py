"""How many requests per second one LLM replica sustains within its token objectives.

A mean-value model of the engine in ``gpuserve.llm.engine``, priced by the same cost rule
(``EngineParams.step_cost_s``). At a request rate ``r``, with mean uncached prompt ``u``
tokens after ``c`` cached ones, mean output ``o`` tokens and a mean context of
``prompt + o / 2`` while decoding:

* each request adds ``w = step_cost_s(u, o, o * context, pairs) - decode_base_s`` seconds
  of engine work beyond the fixed cost per step, where ``pairs`` is the attention of the
  root mean square prompt (``prompt_pairs``, hits in the same share): a mix of long and
  short prompts does more of it than its mean prompt would, so the load is
  ``rho = r * w`` and a step lasts on
  average ``T = decode_base_s / (1 - rho)`` (the fixed cost is shared by ever larger
  batches as the load grows; at ``rho`` = 1 the engine cannot keep up);
* ``r * o * T`` sequences decode at once (Little's law) and hold ``context`` tokens each:
  the KV cache's occupancy and the running-sequence bound are the second limits;
* a request's time per output token is the mean step over its life; its time to first
  token is the step in progress (which may be prefilling a long prompt too) plus its own
  prefill in chunks of ``max_batched_tokens``, each beside the decoding sequences;
* prompts also queue for each other: a step carries at most ``max_batched_tokens`` tokens,
  the decoding sequences' among them, so prompts are served first come, first served at
  what the rest of the budget computes (``_prompt_queue_s``). Their service times spread
  with the prompts' lengths (and attention with their squares), and their wait at the
  quantile is that of an M/G/1 queue: ``E[W] / rho * ln(rho / (1 - q))`` with
  ``E[W] = r E[s^2] / (2 (1 - rho))``, ``rho = r E[s]`` (the exponential approximation of
  its tail), plus the quantile prompt's own service. The time to first token is the larger
  of the two figures. Without the queue the model put the rate for a tight TTFT objective up
  to 2.2 times above what the engine sustains (docs/bench-notes/llm-capacity.md,
  2026-11-28).

Percentiles: the ``r * o * T`` arrivals during one request's life are Poisson, so at the
objectives' quantile ``z * sqrt(r * o * T)`` more than the mean arrive (``z`` the normal
quantile), each adding its work ``w``, spread over the request's ``o`` tokens and stretched
by ``1 / (1 - rho)^2`` (the surplus slows every step, and a slower step lets more requests
join the batch); the prompt is the observed prompt length at that quantile. The square was
chosen against the engine itself: tests/llm/test_capacity.py replays Poisson traffic through
the engine at the computed rate (objectives met) and 30% above it (missed). The rate is the
largest for which every limit holds (each grows with the rate: found by bisection).

The mean step is not what a replica's metrics measure: vLLM's TPOT histogram averages the
gaps over the tokens, and a stream's token waits for the whole step, its own decode work
and the prompts queued behind its own in it. ``output_gap_s`` models that mean, and
``time_scale`` runs it backwards to price an engine by what it was seen to do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

from gpuserve.llm.params import EngineParams, prompt_pairs

Limit = Literal["ttft", "tpot", "kv-cache", "running", "unreachable"]
# KV-cache occupancy (at the quantile) a plan may use: beyond it the engine starts to
# preempt sequences, which recompute their whole context.
KV_LIMIT = 0.9
_BISECTIONS = 50


def _require(
    owner: object, names: tuple[str, ...], ok: Callable[[float], bool], wording: str
) -> None:
    for name in names:
        value = getattr(owner, name)
        if not ok(value):
            raise ValueError(f"{name}: {wording}, got {value}")


@dataclass(frozen=True, slots=True)
class TokenObjectives:
    """Time to first token and time per output token, each met by ``quantile`` of the
    requests."""

    ttft_s: float
    tpot_s: float
    quantile: float = 0.99

    def __post_init__(self) -> None:
        _require(self, ("ttft_s", "tpot_s"), lambda v: v > 0, "must be positive")
        _require(self, ("quantile",), lambda v: 0.5 <= v < 1, "must be in [0.5, 1)")


# The mix assumed before one is measured or stated (spec.llm.expectedTokens): a chat
# service's 1,000-token prompts (4,000 at the objectives' quantile), 200 output tokens.
DEFAULT_PROMPT_TOKENS = 1000
DEFAULT_OUTPUT_TOKENS = 200
PROMPT_HIGH_PER_MEAN = 4


@dataclass(frozen=True, slots=True)
class LoadShape:
    """The token mix of a service's requests, as observed."""

    prompt_mean: float
    prompt_high: float  # prompt tokens at the objectives' quantile
    output_mean: float
    prefix_hit_rate: float = 0.0  # share of prompt tokens found in the prefix cache
    # The mean of the prompts' squared lengths (their attention grows with it); None: the
    # mean's square, as if every prompt were of the mean length.
    prompt_square_mean: float | None = None
    # The means of their cubes and fourth powers: the spread of the prompts' prefill times
    # (attention grows with a prompt's square), which sets how long prompts queue for the
    # steps' token budget. None: the least the lower moments allow.
    prompt_cube_mean: float | None = None
    prompt_fourth_mean: float | None = None
    # The mean of the outputs' squared lengths: how far one window's mean output strays
    # (``gpuserve.llm.mixing``). None: unobserved.
    output_square_mean: float | None = None

    def __post_init__(self) -> None:
        names = ("prompt_mean", "prompt_high", "output_mean")
        _require(self, names, lambda v: v >= 1, "must be at least 1 token")
        _require(self, ("prefix_hit_rate",), lambda v: 0 <= v < 1, "must be in [0, 1)")
        for name in (
            "prompt_square_mean",
            "prompt_cube_mean",
            "prompt_fourth_mean",
            "output_square_mean",
        ):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name}: must not be negative, got {value}")

    @property
    def prompt_rms(self) -> float:
        """The root mean square prompt: the length whose attention is the mix's mean;
        never below the mean, which a histogram's bucket spread can undercut."""
        return math.sqrt(self.prompt_moment(2))

    def prompt_moment(self, power: int) -> float:
        """The mean of the prompts' lengths raised to ``power`` (1 to 4): ``prompt_moments``."""
        if not 1 <= power <= 4:
            raise ValueError(f"power: must be 1 to 4, got {power}")
        return self.prompt_moments()[power - 1]

    def prompt_moments(self) -> tuple[float, float, float, float]:
        """The means of the prompts' lengths to the powers 1 to 4. A moment not observed, or
        observed below what the lower ones imply (a histogram's bucket spread can undercut
        them), is the least they allow: ``E[u^k]^(1/k)`` grows with ``k``."""
        moments = [self.prompt_mean]
        for power, given in (
            (2, self.prompt_square_mean),
            (3, self.prompt_cube_mean),
            (4, self.prompt_fourth_mean),
        ):
            least = float(moments[-1] ** (power / (power - 1)))
            moments.append(least if given is None else max(least, given))
        return moments[0], moments[1], moments[2], moments[3]


def default_shape(
    prompt: int = DEFAULT_PROMPT_TOKENS,
    output: int = DEFAULT_OUTPUT_TOKENS,
    prompt_high: int | None = None,
    longest: int | None = None,
) -> LoadShape:
    """A mix stated by its means (the default one unless given): the prompt at the
    quantile is ``prompt_high``, else ``PROMPT_HIGH_PER_MEAN`` times the mean, within
    ``longest`` tokens (the context length, less the output)."""
    high = prompt_high if prompt_high is not None else PROMPT_HIGH_PER_MEAN * prompt
    if longest is not None:
        high = max(prompt, min(high, longest))
    return LoadShape(float(prompt), float(high), float(output))


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the model expects of one replica at ``rate`` requests/s."""

    rate: float
    step_s: float  # mean step
    ttft_s: float  # at the quantile
    tpot_s: float  # at the quantile
    kv_usage: float  # at the quantile
    running: float  # at the quantile

    def broken(self, objectives: TokenObjectives, params: EngineParams) -> Limit | None:
        """The first limit this load breaks, None when it keeps them all."""
        if self.ttft_s > objectives.ttft_s:
            return "ttft"
        if self.tpot_s > objectives.tpot_s:
            return "tpot"
        if self.kv_usage > KV_LIMIT:
            return "kv-cache"
        if self.running > params.max_running:
            return "running"
        return None


@dataclass(frozen=True, slots=True)
class ReplicaCapacity:
    """The sustainable rate, the limit that sets it, and the model's figures there."""

    rate: float
    limit: Limit
    at_rate: Prediction


def predict(params: EngineParams, shape: LoadShape, quantile: float, rate: float) -> Prediction:
    """The model's figures for one replica serving ``rate`` requests/s."""
    z = max(0.0, NormalDist().inv_cdf(quantile))
    uncached_high = shape.prompt_high * (1.0 - shape.prefix_hit_rate)
    output = shape.output_mean
    work, context = _per_request(params, shape)
    rho = rate * work
    if rho >= 1.0:
        return Prediction(rate, math.inf, math.inf, math.inf, math.inf, math.inf)
    step = params.decode_base_s / (1.0 - rho)
    decoding = rate * output * step
    # Arrivals during one request's life (``decoding`` on average, Poisson) beyond the
    # mean add their work, stretched by the load, spread over its tokens.
    surplus = z * math.sqrt(decoding) * work / (1.0 - rho) ** 2
    step_high = step + surplus / output
    running_high = decoding + z * math.sqrt(decoding)
    # The step in progress (which may be prefilling a long prompt too), then the prompt's
    # own chunks: each fills the step's token budget, beside the decoding sequences only.
    chunks = max(1, math.ceil(uncached_high / params.max_batched_tokens))
    first_chunk = min(uncached_high, params.max_batched_tokens)
    beside = params.step_cost_s(0, running_high, running_high * context)
    # The chunk in progress is taken from the middle of a prompt as long as this one.
    cached_high = shape.prompt_high - uncached_high
    in_progress = _prompt_s(params, first_chunk, (shape.prompt_high - first_chunk) / 2.0)
    ttft = step_high + chunks * beside + in_progress + _prompt_s(params, uncached_high, cached_high)
    ttft = max(ttft, _prompt_queue_s(params, shape, quantile, rate, decoding, context))
    kv = running_high * context / params.capacity_tokens
    return Prediction(rate, step, ttft, step_high, kv, running_high)


def replica_capacity(
    params: EngineParams, shape: LoadShape, objectives: TokenObjectives
) -> ReplicaCapacity:
    """The largest request rate one replica serves within ``objectives``."""
    low, high = 0.0, saturation_rate(params, shape)
    floor = predict(params, shape, objectives.quantile, high * 1e-9)
    if floor.broken(objectives, params) is not None:
        return ReplicaCapacity(0.0, "unreachable", floor)
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2.0
        if predict(params, shape, objectives.quantile, mid).broken(objectives, params) is None:
            low = mid
        else:
            high = mid
    beyond = predict(params, shape, objectives.quantile, high).broken(objectives, params)
    return ReplicaCapacity(low, beyond or "ttft", predict(params, shape, objectives.quantile, low))


def output_gap_s(params: EngineParams, shape: LoadShape, rate: float) -> float:
    """The mean time between a stream's output tokens at ``rate`` requests/s (one
    replica), averaged over the tokens, as vLLM's TPOT histogram averages it; infinite at
    or past the engine's saturation.

    The mean step ``b / (1 - r w)`` (``predict``) shares each step's cost among every
    sequence decoding in it. A token waits for the whole step, and the steps a stream
    decodes in are not a random sample of them:

    * its own sequence's decode work, ``c`` a step, is in every one of them;
    * the prompts that arrived while its own prompt waited and was prefilled (``S``)
      queue behind it, first come first served, and are prefilled in its first steps,
      together with those arriving meanwhile: ``rho_p S / (1 - rho_p)`` more prompt work
      over its ``o`` steps, where ``rho_p`` is the share of the engine's time that the
      prompts take. Long prompts make ``S`` long, so more of the prompts' work falls
      into the steps that streams decode in.

    The gap is then ``(b + c + rho_p S / ((1 - rho_p) o)) / (1 - r w)``. The wait is
    left out of ``S``: at a load where prompts queue, counting it overshoots (the
    decoding streams then leave before the queue is cleared). Checked against the engine
    over seven token mixes at loads of 0.1 to 0.7 (``bench/llm_fit_check.py``): run
    backwards, the per-step mean read the model's own engine as up to 1.16 times slower
    than it is on long-tailed prompts; this reads it within 0.95-1.05, except where the
    KV cache fills and sequences are preempted (a window the rule does not fit)."""
    return _gap(_GapCosts.of(params, shape), rate, 1.0)


@dataclass(frozen=True, slots=True)
class _GapCosts:
    """The engine seconds ``output_gap_s`` adds up, all of them proportional to the
    engine's time costs (so a factor on those costs multiplies each)."""

    base: float  # the fixed cost per step
    own: float  # a decoding sequence's cost per step, at the mix's mean context
    work: float  # a request's work beyond the fixed costs (``request_work_s``)
    prompt: float  # of which computing its prompt
    prompt_time: float  # a prompt's prefill: its work and the fixed cost of its chunks
    output: float  # tokens

    @classmethod
    def of(cls, params: EngineParams, shape: LoadShape) -> _GapCosts:
        work, context = _per_request(params, shape)
        uncached = shape.prompt_mean * (1.0 - shape.prefix_hit_rate)
        prompt = params.step_cost_s(uncached, 0, 0, _mix_pairs(shape)) - params.decode_base_s
        # A prompt's chunks: the last one mostly partly filled.
        chunks = max(1.0, uncached / params.max_batched_tokens + 0.5)
        own = params.step_cost_s(0, 1, context) - params.decode_base_s
        base = params.decode_base_s
        return cls(base, own, work, prompt, prompt + chunks * base, shape.output_mean)


def _gap(costs: _GapCosts, rate: float, factor: float) -> float:
    """``output_gap_s`` with every time cost times ``factor``."""
    # The prompts' share is within the load's (a prompt's work is within a request's).
    load, prompts = factor * rate * costs.work, factor * rate * costs.prompt
    if load >= 1.0:
        return math.inf
    behind = prompts * factor * costs.prompt_time / ((1.0 - prompts) * costs.output)
    return (factor * (costs.base + costs.own) + behind) / (1.0 - load)


def time_scale(
    params: EngineParams, shape: LoadShape, rate: float, mean_gap_s: float
) -> float | None:
    """The factor on ``params``' time costs that makes the model's mean gap between a
    stream's tokens at ``rate`` requests/s (one replica, ``output_gap_s``) the measured
    ``mean_gap_s`` (the mean of vLLM's TPOT histogram): the model run backwards, so a
    replica is priced by what it was seen to do.

    The gap grows with the factor without bound before the engine's work reaches all its
    time (``k r w = 1``), so one factor fits: found by bisection. None when there is
    nothing to go by (no gap measured, or no load)."""
    if not mean_gap_s > 0 or not rate > 0:
        return None
    costs = _GapCosts.of(params, shape)
    if not costs.work > 0:  # no work beyond the fixed costs: the gap is linear
        per_factor = costs.base + costs.own
        return mean_gap_s / per_factor if per_factor > 0 else None
    # Bisection over the share of the engine's time the load takes at the factor.
    low, high = 0.0, 1.0
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2.0
        if _gap(costs, rate, mid / (rate * costs.work)) < mean_gap_s:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0 / (rate * costs.work)


def request_work_s(params: EngineParams, shape: LoadShape) -> float:
    """Engine seconds one request of ``shape``'s mix adds beyond the fixed cost per step
    (the model's ``w``: at ``1 / w`` requests/s the engine has no time left)."""
    return _per_request(params, shape)[0]


def saturation_rate(params: EngineParams, shape: LoadShape) -> float:
    """The rate at which the engine's work per second reaches 1 (no limit is above it)."""
    work = request_work_s(params, shape)
    return 1.0 / work if work > 0 else 1e9


def _prompt_s(params: EngineParams, tokens: float, before: float) -> float:
    """Engine seconds of computing ``tokens`` prompt tokens after ``before`` others of the
    same sequence, beyond the fixed cost of the steps that carry them."""
    return params.prefill_step_s(tokens, before) - params.decode_base_s


def _prompt_queue_s(
    params: EngineParams,
    shape: LoadShape,
    quantile: float,
    rate: float,
    decoding: float,
    context: float,
) -> float:
    """Time to first token at ``quantile`` of a prompt that waits for the prompts ahead of it
    in the steps' token budget, beside ``decoding`` sequences of ``context`` tokens each
    (module docstring).

    A prompt of ``u`` tokens, ``h`` of them in the prefix cache, is served in
    ``u (1 - h) / room`` steps' worth of the budget left beside the decoding sequences
    (``room``), paying that share of those steps' fixed and decoding cost, plus its tokens
    and their attention: ``s(u) = a u + b u^2``, whose moments the prompts' moments give.
    Infinite once prompts arrive faster than the budget computes them."""
    hit = shape.prefix_hit_rate
    room = max(1.0, params.max_batched_tokens - decoding)
    beside = params.step_cost_s(0, decoding, decoding * context)
    # prompt_pairs(u (1 - h), u h) = u^2 (1 - h^2) / 2 + u (1 - h) / 2
    pair = params.prefill_s_per_token_pair
    a = (1.0 - hit) * (beside / room + params.prefill_s_per_token + pair / 2.0)
    b = pair * (1.0 - hit * hit) / 2.0
    m1, m2, m3, m4 = shape.prompt_moments()
    mean_s = a * m1 + b * m2
    square_s = a * a * m2 + 2.0 * a * b * m3 + b * b * m4
    own = a * shape.prompt_high + b * shape.prompt_high**2
    rho = rate * mean_s
    if rho >= 1.0:
        return math.inf
    miss = 1.0 - quantile
    if rho <= miss:  # the wait exceeds zero for fewer than the quantile's misses
        return own
    mean_wait = rate * square_s / (2.0 * (1.0 - rho))
    return mean_wait / rho * math.log(rho / miss) + own


def _per_request(params: EngineParams, shape: LoadShape) -> tuple[float, float]:
    """(engine seconds one request adds beyond the fixed cost per step, its mean context
    while decoding)."""
    uncached = shape.prompt_mean * (1.0 - shape.prefix_hit_rate)
    output = shape.output_mean
    context = shape.prompt_mean + output / 2.0
    work = (
        params.step_cost_s(uncached, output, output * context, _mix_pairs(shape))
        - params.decode_base_s
    )
    return work, context


def _mix_pairs(shape: LoadShape) -> float:
    """The attention of the mix's prompts: that of its root mean square prompt, hits in
    proportion."""
    rms = shape.prompt_rms
    return prompt_pairs(rms * (1.0 - shape.prefix_hit_rate), rms * shape.prefix_hit_rate)
