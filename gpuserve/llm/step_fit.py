"""The engine's time costs fitted to step times measured on a real GPU.

A calibration run (``bench/gpu_engine_timing.py``) times decode steps over a grid of batch
sizes and context lengths, prefills over a range of prompt lengths, and (since
2026-11-26) prompt chunks computed after cached tokens of the same prompt. The engine's
cost rule (``EngineParams.step_cost_s``) is linear in its five costs, so they follow by
least squares: decode steps give the fixed cost, the cost per decoding sequence and per
context token; prefills, with the same fixed cost, the cost per prompt token and per
(prompt token, earlier token) pair, the attention that grows with the square of a
prompt's length. Decode residuals are relative, so a 6 ms step counts as much as a 30 ms
one, and the fit keeps every cost non-negative (a cost the data cannot tell from zero is
zero, not a negative number that would make a larger batch cheaper).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any

from gpuserve.llm.params import EngineParams, prompt_pairs


@dataclass(frozen=True)
class DecodeTiming:
    """One decode step: ``batch`` sequences each attending to ``context`` tokens."""

    batch: int
    context: int
    seconds: float


@dataclass(frozen=True)
class PrefillTiming:
    """One step that computes ``tokens`` tokens of a prompt after ``cached`` of its tokens
    already in the cache."""

    tokens: int
    seconds: float
    cached: int = 0

    @property
    def pairs(self) -> float:
        return prompt_pairs(self.tokens, self.cached)


@dataclass(frozen=True)
class FittedCosts:
    decode_base_s: float
    decode_s_per_seq: float
    decode_s_per_context_token: float
    prefill_s_per_token: float
    prefill_s_per_token_pair: float
    decode_worst_error: float  # largest |model - measured| / measured over decode steps
    prefill_worst_error: float

    def applied_to(self, params: EngineParams) -> EngineParams:
        """``params`` with these time costs; its sizes unchanged."""
        return replace(
            params,
            decode_base_s=self.decode_base_s,
            decode_s_per_seq=self.decode_s_per_seq,
            decode_s_per_context_token=self.decode_s_per_context_token,
            prefill_s_per_token=self.prefill_s_per_token,
            prefill_s_per_token_pair=self.prefill_s_per_token_pair,
        )


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None for a singular system."""
    n = len(vector)
    rows = [[*matrix[i], vector[i]] for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        if abs(rows[pivot][col]) < 1e-300:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(n):
            if r != col:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [rows[i][n] / rows[i][i] for i in range(n)]


def _least_squares(
    features: Sequence[Sequence[float]], targets: Sequence[float], *, relative: bool
) -> list[float]:
    """Non-negative coefficients minimising the sum of squared residuals, each relative
    to its target or plain.

    With three unknowns at most, trying every subset of them and keeping the best
    all-non-negative solution is exact non-negative least squares."""
    width = len(features[0])
    scales = [t if relative else 1.0 for t in targets]
    best: tuple[float, list[float]] | None = None
    for size in range(1, width + 1):
        for subset in combinations(range(width), size):
            rows = [[row[j] / k for j in subset] for row, k in zip(features, scales, strict=True)]
            wanted = [t / k for t, k in zip(targets, scales, strict=True)]
            normal = [[sum(r[a] * r[b] for r in rows) for b in range(size)] for a in range(size)]
            right = [sum(r[a] * w for r, w in zip(rows, wanted, strict=True)) for a in range(size)]
            solution = _solve(normal, right)
            if solution is None or min(solution) < 0:
                continue
            coefficients = [0.0] * width
            for j, value in zip(subset, solution, strict=True):
                coefficients[j] = value
            residual = sum(
                ((sum(c * x for c, x in zip(coefficients, row, strict=True)) - t) / k) ** 2
                for row, t, k in zip(features, targets, scales, strict=True)
            )
            if best is None or residual < best[0]:
                best = (residual, coefficients)
    if best is None:
        raise ValueError("timings: no non-negative fit (are any step times positive?)")
    return best[1]


def fit_step_costs(decode: Sequence[DecodeTiming], prefill: Sequence[PrefillTiming]) -> FittedCosts:
    """The five time costs of ``EngineParams`` that best explain the timings."""
    if len(decode) < 3:
        raise ValueError(f"decode: need at least 3 timings, got {len(decode)}")
    if not prefill:
        raise ValueError("prefill: need at least 1 timing")
    for seconds in [d.seconds for d in decode] + [p.seconds for p in prefill]:
        if not seconds > 0:
            raise ValueError(f"seconds: every timing must be positive, got {seconds}")
    base, per_seq, per_context = _least_squares(
        [[1.0, d.batch, d.batch * d.context] for d in decode],
        [d.seconds for d in decode],
        relative=True,
    )
    # A prefill step pays the same fixed cost; the rest is the prompt's tokens and their
    # attention pairs. Plain (absolute) least squares here: long prompts, which decide time
    # to first token, weigh most; a short prompt's matrix products hide under the weights'
    # read and cost less.
    per_token, per_pair = _least_squares(
        [[p.tokens, p.pairs] for p in prefill], [p.seconds - base for p in prefill], relative=False
    )

    def decode_model(d: DecodeTiming) -> float:
        return base + per_seq * d.batch + per_context * d.batch * d.context

    def prefill_model(p: PrefillTiming) -> float:
        return base + per_token * p.tokens + per_pair * p.pairs

    return FittedCosts(
        decode_base_s=base,
        decode_s_per_seq=per_seq,
        decode_s_per_context_token=per_context,
        prefill_s_per_token=per_token,
        prefill_s_per_token_pair=per_pair,
        decode_worst_error=max(abs(decode_model(d) / d.seconds - 1) for d in decode),
        prefill_worst_error=max(abs(prefill_model(p) / p.seconds - 1) for p in prefill),
    )


# The prompt chunks after cached tokens that the fit takes: those timed with the attention
# kernel that reads grouped key/value heads in place, as vLLM's do, and no longer than the
# longest prefill step timed (vLLM's default step budget): no engine step computes more.
FITTED_PREFIX_MASK = "lower-right-gqa"


def prefill_timings(record: Mapping[str, Any]) -> list[PrefillTiming]:
    """A calibration record's prefill steps: its prompts alone, then its chunks after
    cached tokens (records before 2026-11-26 have none)."""
    alone = [PrefillTiming(int(p["tokens"]), p["seconds"]) for p in record["prefill"]]
    longest = max(p.tokens for p in alone)
    return alone + [
        PrefillTiming(int(p["tokens"]), p["seconds"], int(p["cached"]))
        for p in record.get("prefixed", [])
        if p.get("mask") == FITTED_PREFIX_MASK and p["tokens"] <= longest
    ]


def fit_record(record: Mapping[str, Any]) -> FittedCosts:
    """The costs of a calibration run as ``bench/gpu_engine_timing.py`` records it: its
    ``decode`` (batch, context, seconds), ``prefill`` (tokens, seconds) and ``prefixed``
    (tokens, cached, mask, seconds) entries."""
    return fit_step_costs(
        [DecodeTiming(int(d["batch"]), int(d["context"]), d["seconds"]) for d in record["decode"]],
        prefill_timings(record),
    )
