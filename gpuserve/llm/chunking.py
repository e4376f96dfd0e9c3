"""How many prompt tokens one engine step may compute: vLLM's ``max_num_batched_tokens``.

A prompt longer than that budget is prefilled in chunks, one per step, and every
sequence decoding in the same batch waits for each of those steps: a step that carries a
full chunk is one token gap of theirs. vLLM's default budget (8,192 tokens) costs about
0.25 s a step on an H100 for an 8B model, so beside a long prompt the neighbours' token
gaps exceed a 100 ms time-per-output-token objective for the prompt's whole prefill. In
the token-level simulator on the engine measured on an H100, the Mooncake conversation
trace (TPOT 100 ms) met both objectives for 98.1% of requests with 8,192-token chunks and
for 100% with 2,048 (4% more GPU-hours); docs/llm.md ("Prefill chunks") has the sweep.

So unless the spec sets it, the budget is derived from the service's TPOT objective and
the engine costs of its most preferred class (the one new pods go to first; the pods of
every class mount one model.json): the largest power of two whose step fits within the
objective, the step being the last chunk of the longest prompt the engine admits
(``max_model_len``): its fixed cost, the chunk's tokens, and their attention to the whole
prompt before them, which for a long context outweighs the rest (measured on an H100:
docs/bench-notes/gpu-engine-timing.md). It is never so small that
the fixed cost exceeds a third of the chunk's own prefill time: smaller chunks buy token
gaps with prefill throughput and TTFT (512-token chunks cost the Azure chat trace 4 points
of TTFT attainment on an H100, 1,024 none). On an H100 with an 8B model and Llama 3's
8,192-token context that gives 1,024 tokens for a 50 or 60 ms objective and 2,048 for
100 ms; with a 128k context, 1,024 (the floor) for both: a 2,048-token chunk after 129k
tokens takes 0.48 s. On the Mooncake trace (128k context, TPOT 100 ms) 1,024-token chunks
met the TPOT for 99.8% of requests where 2,048 met it for 98.4-98.8%
(docs/bench-notes/llm-capacity.md).
"""

from __future__ import annotations

from gpuserve.llm.params import EngineParams

# vLLM's own default for online serving; gpuserve never derives a larger budget.
VLLM_DEFAULT_BATCHED_TOKENS = 8192
# The largest share of a chunk's prefill time the step's fixed cost may add.
MAX_STEP_OVERHEAD = 1.0 / 3.0


def chunk_for_objective(engine: EngineParams, tpot_s: float) -> int:
    """The largest power of two up to vLLM's default whose full-chunk step fits
    ``tpot_s`` on ``engine``, but at least the smallest whose fixed step cost stays within
    ``MAX_STEP_OVERHEAD`` of its prefill time and the running-sequence bound (vLLM refuses
    a smaller budget)."""
    floor = 1 << max(0, engine.max_running - 1).bit_length()
    while (
        floor < VLLM_DEFAULT_BATCHED_TOKENS
        and engine.decode_base_s > MAX_STEP_OVERHEAD * floor * engine.prefill_s_per_token
    ):
        floor *= 2
    best = floor
    chunk = floor * 2
    while chunk <= VLLM_DEFAULT_BATCHED_TOKENS:
        # The last chunk of the longest prompt the engine admits: it attends to all the
        # prompt before it, so it is the slowest step a chunk makes.
        before = max(0, engine.max_model_len - chunk)
        if engine.prefill_step_s(chunk, before) <= tpot_s:
            best = chunk
        chunk *= 2
    return best
