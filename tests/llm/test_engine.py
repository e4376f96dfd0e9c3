"""The LLM engine model: continuous batching, chunked prefill, KV-cache limits, preemption
and the prefix cache, driven on a virtual clock."""

from __future__ import annotations

import pytest

from gpuserve.llm.engine import Engine, Request
from gpuserve.llm.kvcache import KVCache, chain_keys
from gpuserve.llm.params import EngineParams, params_from_strings
from gpuserve.llm.replay import replay

# Slow, round costs so that times are easy to read: 10 ms a step, 1 ms a prompt token, 1 us
# for each token a prompt token attends to.
COSTS = dict(
    prefill_s_per_token=1e-3,
    prefill_s_per_token_pair=1e-6,
    decode_base_s=10e-3,
    decode_s_per_seq=1e-3,
    decode_s_per_context_token=1e-5,
)


def params(**overrides: object) -> EngineParams:
    values: dict[str, object] = dict(COSTS, block_size=4, num_blocks=64, max_model_len=256)
    values.update(overrides)
    return EngineParams(**values)


def hashes(*ids: int) -> tuple[int, ...]:
    return tuple(ids)


# ----------------------------------------------------------------------------- batching
def test_a_new_request_joins_the_batch_while_another_decodes() -> None:
    # B arrives while A decodes; it is admitted at the next step, not after A ends.
    run = replay([(0.0, 8, 20, ()), (0.05, 8, 5, ())], params())
    a, b = run.timings["0"], run.timings["1"]
    assert a.finish_s is not None and b.finish_s is not None
    assert b.token_s[-1] < a.finish_s, "B finished before A: they were batched together"
    shared = [plan for _, plan in run.steps if set(plan.scheduled) == {"0", "1"}]
    assert len(shared) >= 4
    assert len(run.steps) < 20 + 5, "fewer steps than tokens: steps produce several"
    assert [len(t.token_s) for t in (a, b)] == [20, 5]


def test_max_running_bounds_the_batch() -> None:
    run = replay([(0.0, 4, 6, ())] * 3, params(max_running=2))
    assert max(len(plan.scheduled) for _, plan in run.steps) == 2
    first_tokens = sorted(t.token_s[0] for t in run.timings.values())
    assert first_tokens[2] >= min(t.finish_s or 0 for t in run.timings.values())


def test_step_cost_grows_with_batch_and_context() -> None:
    def decode_costs(prompt: int, concurrent: int) -> set[float]:
        run = replay([(0.0, prompt, 3, ())] * concurrent, params())
        plans = [plan for _, plan in run.steps if plan.decode_seqs == concurrent]
        assert plans and all(plan.prefill_tokens == 0 for plan in plans)
        return {round(plan.cost_s, 9) for plan in plans}

    one, four = decode_costs(8, 1), decode_costs(8, 4)
    assert min(four) > max(one)
    assert min(decode_costs(200, 1)) > max(one), "a longer context costs more per step"


# ----------------------------------------------------------------------------- prefill
def test_ttft_grows_with_uncached_prompt_length() -> None:
    ttft = {n: replay([(0.0, n, 1, ())], params()).timings["0"].ttft_s for n in (10, 100, 200)}
    assert ttft[10] is not None and ttft[100] is not None and ttft[200] is not None
    assert ttft[10] < ttft[100] < ttft[200]
    # A lone request's prefill is one step: the fixed cost plus its prompt tokens, each
    # attending to itself and those before it (1 + 2 + ... + 100 pairs).
    assert ttft[100] == pytest.approx(
        COSTS["decode_base_s"]
        + 100 * COSTS["prefill_s_per_token"]
        + 5050 * COSTS["prefill_s_per_token_pair"]
    )


def test_a_chunk_attends_to_the_chunks_before_it_and_to_a_cached_prefix() -> None:
    pair = COSTS["prefill_s_per_token_pair"]
    # 120 prompt tokens in chunks of 32: every token still attends to all before it.
    run = replay([(0.0, 120, 1, ())], params(max_batched_tokens=32))
    chunks = [plan for _, plan in run.steps if plan.prefill_tokens]
    assert [c.prefill_tokens for c in chunks] == [32, 32, 32, 24]
    # 32 x (before + 16.5), then 24 x (96 + 12.5)
    assert [c.prefill_pairs for c in chunks] == [528, 1552, 2576, 2604]
    assert sum(c.prefill_pairs for c in chunks) == 120 * 121 / 2
    last = chunks[-1]
    assert last.cost_s == pytest.approx(
        COSTS["decode_base_s"] + 24 * COSTS["prefill_s_per_token"] + 2604 * pair
    )
    # A prompt whose first 36 tokens are cached computes 4, each attending to the 36 too.
    shared = hashes(*range(10))
    warm = replay([(0.0, 40, 1, shared), (1.0, 40, 1, shared)], params())
    second = next(plan for start, plan in warm.steps if start >= 1.0 and plan.prefill_tokens)
    assert (second.prefill_tokens, second.prefill_pairs) == (4, 4 * 36 + 10)


def test_a_long_prompt_is_prefilled_in_chunks_while_others_decode() -> None:
    p = params(max_batched_tokens=32)
    run = replay([(0.0, 4, 30, ()), (0.03, 120, 2, ())], p)
    long_prompt = run.timings["1"]
    chunk_steps = [plan for _, plan in run.steps if "1" in plan.scheduled]
    assert all(plan.tokens <= 32 for _, plan in run.steps)
    assert len(chunk_steps) >= 120 // 32 + 1
    # The decoding request kept producing a token in every step of the chunked prefill.
    first_chunk = next(start for start, plan in run.steps if "1" in plan.scheduled)
    short = run.timings["0"]
    during = [t for t in short.token_s if first_chunk < t <= (long_prompt.first_token_s or 0)]
    assert len(during) >= 120 // 32


# ----------------------------------------------------------------------------- prefix cache
def test_a_cached_prefix_lowers_ttft_and_is_counted() -> None:
    prompt = 40  # ten blocks of 4
    shared = hashes(*range(10))
    run = replay([(0.0, prompt, 2, shared), (1.0, prompt, 2, shared)], params())
    cold, warm = run.timings["0"], run.timings["1"]
    assert cold.cached_tokens == 0
    # The prompt's last token is always computed: nine of the ten blocks are reused.
    assert warm.cached_tokens == 36
    assert cold.ttft_s is not None and warm.ttft_s is not None
    assert warm.ttft_s < cold.ttft_s / 3
    stats = run.engine.stats()
    assert (stats.prefix_queried_tokens, stats.prefix_hit_tokens) == (80, 36)


def test_a_prefix_matches_only_after_the_same_preceding_blocks() -> None:
    first = hashes(1, 2, 3, 4, 5)
    other_root = hashes(9, 2, 3, 4, 5)  # same later blocks behind a different first one
    run = replay([(0.0, 20, 1, first), (1.0, 20, 1, other_root)], params())
    assert run.timings["1"].cached_tokens == 0
    diverging = hashes(1, 2, 7, 8, 9)
    run = replay([(0.0, 20, 1, first), (1.0, 20, 1, diverging)], params())
    assert run.timings["1"].cached_tokens == 8


def test_prefix_caching_off_shares_nothing() -> None:
    same = hashes(*range(10))
    run = replay([(0.0, 40, 1, same), (1.0, 40, 1, same)], params(prefix_caching=False))
    assert run.timings["1"].cached_tokens == 0
    assert run.engine.stats().prefix_queried_tokens == 0


def test_cached_blocks_are_evicted_least_recently_used_and_deepest_first() -> None:
    # 12 blocks of 4. X, Y and Z (16-token prompts, four hashed blocks each) run one after
    # another and fill the cache with their blocks once done.
    p = params(num_blocks=12, max_model_len=48)
    x, y, z = hashes(1, 2, 3, 4), hashes(11, 12, 13, 14), hashes(21, 22, 23, 24)
    seq = [(0.0, 16, 1, x), (1.0, 16, 1, y), (2.0, 16, 1, z)]
    # W needs two blocks: the least recently released ones, X's two deepest, go.
    w = (3.0, 8, 1, hashes(31, 32))
    run = replay([*seq, w, (4.0, 16, 1, x), (5.0, 16, 1, z)], p)
    assert run.engine.cache.evictions >= 2
    assert run.timings["4"].cached_tokens == 8, "X's first two blocks were kept"
    assert run.timings["5"].cached_tokens == 12, "Z, more recent than X and Y, was kept"


# ----------------------------------------------------------------------------- KV limits
def test_requests_wait_while_the_kv_cache_is_full() -> None:
    # 10 blocks of 4; a 16-token prompt takes 4 at admission: two fit, the third waits.
    p = params(num_blocks=10, max_model_len=40)
    engine = Engine(p)
    for i in range(3):
        engine.add(Request(str(i), 16, 4, 0.0))
    plan = engine.begin_step()
    assert plan is not None and plan.admitted == ("0", "1")
    assert engine.stats().waiting == 1
    assert engine.stats().kv_usage == pytest.approx(8 / 10)
    engine.end_step(plan.cost_s)

    run = replay([(0.0, 16, 4, ())] * 3, p)
    third, done_first = run.timings["2"], min(t.finish_s or 0 for t in run.timings.values())
    assert third.token_s[0] >= done_first


def test_a_sequence_that_cannot_grow_preempts_the_newest_which_recomputes() -> None:
    # 8 blocks of 4: two requests of 4 + 20 tokens need 6 blocks each as they grow.
    p = params(num_blocks=8, max_model_len=32)
    run = replay([(0.0, 4, 20, ()), (0.0, 4, 20, ())], p)
    older, newer = run.timings["0"], run.timings["1"]
    assert older.preemptions == 0 and newer.preemptions >= 1
    assert run.engine.stats().preemptions == newer.preemptions
    assert [len(older.token_s), len(newer.token_s)] == [20, 20]
    recompute = [plan for _, plan in run.steps if "1" in plan.admitted][1:]
    assert recompute and all(plan.prefill_tokens > 4 for plan in recompute), (
        "re-admitted with its prompt and generated tokens to compute again"
    )
    assert run.engine.stats().kv_usage == 0.0
    # A step that preempts admits nobody, so the victim is not re-admitted at once (with
    # 2-token steps its first chunk would fit).
    tight = params(num_blocks=8, max_model_len=32, max_batched_tokens=2)
    run = replay([(0.0, 4, 20, ()), (0.0, 4, 20, ())], tight)
    preempting = [plan for _, plan in run.steps if plan.preempted]
    assert preempting and all(not plan.admitted for plan in preempting)


def test_abort_frees_the_blocks() -> None:
    engine = Engine(params())
    engine.add(Request("a", 30, 10, 0.0))
    plan = engine.begin_step()
    assert plan is not None
    engine.end_step(plan.cost_s)
    assert engine.stats().kv_usage > 0
    assert engine.abort("a") and not engine.abort("a")
    assert engine.idle and engine.stats().kv_usage == 0.0 and engine.begin_step() is None


def test_abort_during_a_step_drops_its_tokens() -> None:
    engine = Engine(params())
    engine.add(Request("a", 8, 5, 0.0))
    engine.add(Request("b", 8, 5, 0.0))
    assert engine.begin_step() is not None
    engine.abort("a")
    result = engine.end_step(0.1)
    assert [t.request_id for t in result.tokens] == ["b"]


def test_tokens_carry_ttft_then_inter_token_gaps() -> None:
    engine = Engine(params())
    engine.add(Request("a", 8, 3, 1.0))
    gaps = []
    clock = 1.0
    while not engine.idle:
        plan = engine.begin_step()
        assert plan is not None
        clock += plan.cost_s
        gaps += [(t.index, round(t.gap_s, 9), t.last) for t in engine.end_step(clock).tokens]
    base, token, context, pair = 10e-3, 1e-3, 1e-5, 1e-6
    assert gaps == [
        (0, round(base + 8 * token + 36 * pair, 9), False),
        (1, round(base + token + 9 * context, 9), False),
        (2, round(base + token + 10 * context, 9), True),
    ]
    stats = engine.stats()
    assert (stats.prompt_tokens, stats.generation_tokens, stats.finished) == (8, 3, 1)


def test_without_every_token_a_step_lists_first_tokens_and_times_the_same() -> None:
    def run(every_token: bool) -> tuple[list[tuple[str, int]], dict[str, list[float]], int]:
        engine = Engine(params())
        for rid, prompt, output, at in (("a", 8, 4, 0.0), ("b", 12, 3, 0.0), ("c", 4, 2, 0.0)):
            engine.add(Request(rid, prompt, output, at))
        listed: list[tuple[str, int]] = []
        times: dict[str, list[float]] = {}
        clock = 0.0
        while not engine.idle:
            plan = engine.begin_step()
            assert plan is not None
            clock += plan.cost_s
            result = engine.end_step(clock, every_token=every_token)
            listed += [(t.request_id, t.index) for t in result.tokens]
            times.update((t.request_id, t.token_s) for t in result.finished)
        return listed, times, engine.stats().generation_tokens

    streamed, streamed_times, streamed_count = run(True)
    firsts, times, count = run(False)
    assert len(streamed) == 4 + 3 + 2
    assert firsts == [(rid, index) for rid, index in streamed if index == 0]
    assert times == streamed_times and count == streamed_count == 9


# ----------------------------------------------------------------------------- inputs
def test_impossible_requests_name_the_field() -> None:
    engine = Engine(params(max_model_len=64))
    with pytest.raises(ValueError, match="prompt_tokens: must be at least 1"):
        engine.add(Request("a", 0, 1, 0.0))
    with pytest.raises(ValueError, match="output_tokens: must be at least 1"):
        engine.add(Request("a", 1, 0, 0.0))
    with pytest.raises(ValueError, match="exceeds max_model_len 64"):
        engine.add(Request("a", 60, 5, 0.0))
    engine.add(Request("a", 1, 1, 0.0))
    with pytest.raises(ValueError, match="request_id: 'a' is already"):
        engine.add(Request("a", 1, 1, 0.0))


def test_parameters_from_strings() -> None:
    p = params_from_strings(
        {"block_size": "32", "prefix_caching": "false", "decode_base_s": "1e-3"}
    )
    assert (p.block_size, p.prefix_caching, p.decode_base_s) == (32, False, 1e-3)
    assert p.num_blocks == EngineParams().num_blocks
    with pytest.raises(ValueError, match="block_sise: not an engine parameter"):
        params_from_strings({"block_sise": "32"})
    with pytest.raises(ValueError, match="num_blocks: 'many' is not of type int"):
        params_from_strings({"num_blocks": "many"})
    with pytest.raises(ValueError, match="max_model_len: must be between 2 and the cache's 64"):
        EngineParams(block_size=4, num_blocks=16, max_model_len=100)
    with pytest.raises(ValueError, match="decode_base_s: must not be negative"):
        EngineParams(decode_base_s=-1.0)


def test_chain_keys_depend_on_every_preceding_block() -> None:
    a, b = chain_keys([1, 2, 3]), chain_keys([9, 2, 3])
    assert a[0] != b[0] and a[1] != b[1] and a[2] != b[2]
    assert chain_keys([1, 2]) == a[:2]
    cache = KVCache(4)
    cache.allocate(2)
    cache.publish(a[0])
    cache.publish(a[1])
    assert cache.match(a) == 2 and cache.held_blocks == 2
    cache.release(a[:2])
    assert (cache.held_blocks, cache.cached_blocks, cache.available) == (0, 2, 4)
