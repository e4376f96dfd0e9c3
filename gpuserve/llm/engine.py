"""One LLM engine loop with continuous batching, a paged KV cache and a prefix cache.

The engine is a pure state machine driven by its caller's clock, in two halves per step:

    plan = engine.begin_step()        # choose the batch; plan.cost_s is how long it takes
    ... the emulator sleeps plan.cost_s; a simulator advances its virtual clock ...
    result = engine.end_step(now)     # the tokens the step produced, stamped with ``now``

Requests may be added between the halves; they wait for the next step.

Each step, like vLLM's scheduler (V1):

1. Running sequences, oldest first, each get their pending tokens computed: one for a
   decoding sequence, the rest of the prompt (in chunks) for one still in prefill. When a
   sequence needs a block and none is left, the newest running sequence is preempted: its
   blocks are freed and it goes back to the head of the queue, to be recomputed.
2. Unless that happened, waiting requests are admitted first come, first served while the
   sequence bound, the step's token budget and the KV cache allow; the head of the queue
   blocks those behind it. A request's leading prompt blocks found in the prefix cache are
   not computed.
3. The step costs a fixed ``decode_base_s``, plus ``prefill_s_per_token`` per prompt token
   computed and ``prefill_s_per_token_pair`` per token each of those attends to (the
   tokens before it in its sequence, cached or not, and itself), plus ``decode_s_per_seq``
   per decoding sequence and ``decode_s_per_context_token`` per token of those sequences'
   contexts.

A sequence whose pending tokens are all computed emits one token at the end of the step:
the first token ends its prefill, each later one is one decode step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gpuserve.llm.kvcache import KVCache, chain_keys
from gpuserve.llm.params import EngineParams, prompt_pairs


@dataclass(frozen=True, slots=True)
class Request:
    """A prompt of ``prompt_tokens`` tokens asking for ``output_tokens`` tokens.

    ``block_hashes`` are content hashes of the prompt's leading full blocks of
    ``block_size`` tokens (extra ones are ignored); without them nothing is shared.
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    arrival_s: float
    block_hashes: tuple[int, ...] = ()


@dataclass(slots=True)
class RequestTiming:
    """What happened to one request, on the caller's clock."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0  # prompt tokens found in the prefix cache at first admission
    token_s: list[float] = field(default_factory=list)  # when each output token came out
    finish_s: float | None = None
    preemptions: int = 0

    @property
    def first_token_s(self) -> float | None:
        return self.token_s[0] if self.token_s else None

    @property
    def ttft_s(self) -> float | None:
        return None if not self.token_s else self.token_s[0] - self.arrival_s

    @property
    def e2e_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s


@dataclass(slots=True)  # not frozen: a frozen init costs 4x as much, paid once per token
class Token:
    """One output token. ``gap_s`` is the time since the previous token, or for the first
    token since arrival: the time to first token (TTFT); vLLM's time per output token
    (TPOT) histogram observes the gaps of the others."""

    request_id: str
    index: int
    time_s: float
    gap_s: float
    last: bool


@dataclass(slots=True)  # not frozen: made once per step (see ``Token``)
class StepPlan:
    """The batch of one step and what it costs."""

    cost_s: float
    prefill_tokens: int  # prompt (or recomputed) tokens computed
    decode_seqs: int  # sequences decoding one token
    context_tokens: int  # tokens in the decoding sequences' contexts
    prefill_pairs: float  # (prompt token computed, token it attends to) pairs
    # The sequences computed this step (oldest first), of which newly admitted, and those
    # preempted: kept as sequences, since a simulation never reads their ids.
    batch: tuple[_Sequence, ...] = field(repr=False)
    newly_admitted: tuple[_Sequence, ...] = field(repr=False)
    evicted: tuple[_Sequence, ...] = field(repr=False)

    @property
    def tokens(self) -> int:
        """Tokens computed this step (vLLM's iteration tokens)."""
        return self.prefill_tokens + self.decode_seqs

    @property
    def scheduled(self) -> tuple[str, ...]:
        """Request ids computed this step, oldest first."""
        return _ids(self.batch)

    @property
    def admitted(self) -> tuple[str, ...]:
        return _ids(self.newly_admitted)

    @property
    def preempted(self) -> tuple[str, ...]:
        return _ids(self.evicted)


def _ids(sequences: tuple[_Sequence, ...]) -> tuple[str, ...]:
    return tuple([s.request.request_id for s in sequences])


@dataclass(slots=True)
class StepResult:
    tokens: tuple[Token, ...]
    finished: tuple[RequestTiming, ...]


@dataclass(frozen=True)
class EngineStats:
    """Gauges (now) and counters (since start) for the engine's metrics."""

    running: int
    waiting: int
    kv_usage: float  # fraction of blocks held by running sequences
    prompt_tokens: int  # prompts of requests that produced their first token
    generation_tokens: int
    prefix_queried_tokens: int  # prompt tokens looked up in the prefix cache
    prefix_hit_tokens: int  # of which found
    preemptions: int
    steps: int
    finished: int


class _Sequence:
    """A request inside the engine."""

    # Slots: the step loops read these attributes once per running sequence and step.
    __slots__ = (
        "aborted",
        "admitted_once",
        "anchor",
        "blocks",
        "computed",
        "generated",
        "held_keys",
        "keys",
        "pending",
        "request",
        "timing",
        "token_s",
    )

    def __init__(self, request: Request, keys: tuple[int, ...]) -> None:
        self.request = request
        self.keys = keys  # prefix keys of the prompt's full, hashed blocks
        self.timing = RequestTiming(
            request.request_id, request.arrival_s, request.prompt_tokens, request.output_tokens
        )
        self.token_s = self.timing.token_s  # the timing's own list, one lookup nearer
        self.generated = 0
        self.computed = 0  # tokens whose keys and values are in the cache
        self.held_keys: list[int] = []  # leading prompt blocks held under their key
        # Blocks held, keyed or private: counted apart from ``held_keys`` so the step
        # loop's check for a new block is one comparison.
        self.blocks = 0
        self.pending = 0  # tokens this step computes
        self.admitted_once = False
        self.aborted = False
        # Decoding in the engine's batch (``Engine._batched``): the engine step count at
        # which the fields above were last brought up to date; -1 when they are current.
        self.anchor = -1

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens: what the cache must hold to produce the next."""
        return self.request.prompt_tokens + self.generated

    @property
    def decoding(self) -> bool:
        """Its only missing token is the last one generated (not a prompt or recompute).
        ``Engine.begin_step`` and ``Engine._batch_decoders`` inline this rule: they run it
        for running sequences between two steps."""
        return self.generated > 0 and self.num_tokens - self.computed == 1


class Engine:
    """See the module docstring. Not thread-safe: the caller serializes calls.

    The running sequences that decode, from the oldest on, are *batched*: each step gives
    every one of them a token, so the engine keeps their sum of context tokens, how many
    need a new KV block at each step (every ``block_size`` tokens) and at which step each
    ends, instead of visiting each of them at every step; their fields and token times are
    brought up to date when they are read, end or leave the batch. A step that might
    preempt or run out of token budget before the last of them is planned sequence by
    sequence, as ``batch_decoders=False`` plans every step: the reference the batched steps
    must equal to the last bit (tests/llm/test_batched_decoders.py).
    """

    def __init__(self, params: EngineParams | None = None, *, batch_decoders: bool = True) -> None:
        self.params = params or EngineParams()
        self.cache = KVCache(self.params.num_blocks)
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []  # admission order: oldest first
        self._by_id: dict[str, _Sequence] = {}
        self._in_step: list[_Sequence] | None = None  # the step's sequences visited at its end
        self._prompt_tokens = 0
        self._generation_tokens = 0
        self._queried_tokens = 0
        self._hit_tokens = 0
        self._preemptions = 0
        self._steps = 0
        self._finished = 0
        # The batch: ``_running[:_batched]`` (all of it computed by a step begun).
        self._batching = batch_decoders
        self._batched = 0
        self._context = 0  # their computed tokens, summed
        # How many take a new block at step k: ``_due[k % block_size]``.
        self._due = [0] * self.params.block_size
        self._ending: dict[int, list[_Sequence]] = {}  # step -> those it gives their last token
        self._times: list[float] = []  # when each step since ``_times_from`` ended
        self._times_from = 0

    # ---------------------------------------------------------------- requests
    def add(self, request: Request) -> None:
        """Queues a request; raises ValueError naming the field that makes it impossible."""
        if request.request_id in self._by_id:
            raise ValueError(f"request_id: {request.request_id!r} is already in the engine")
        if request.prompt_tokens < 1:
            raise ValueError(f"prompt_tokens: must be at least 1, got {request.prompt_tokens}")
        if request.output_tokens < 1:
            raise ValueError(f"output_tokens: must be at least 1, got {request.output_tokens}")
        total = request.prompt_tokens + request.output_tokens
        if total > self.params.max_model_len:
            raise ValueError(
                f"prompt_tokens + output_tokens: {total} exceeds max_model_len "
                f"{self.params.max_model_len}"
            )
        full_blocks = request.prompt_tokens // self.params.block_size
        keys = chain_keys(request.block_hashes[:full_blocks])
        sequence = _Sequence(request, keys if self.params.prefix_caching else ())
        self._by_id[request.request_id] = sequence
        self._waiting.append(sequence)

    def abort(self, request_id: str) -> bool:
        """Drops a request (e.g. cancelled by its client); False when it is not here."""
        sequence = self._by_id.pop(request_id, None)
        if sequence is None:
            return False
        sequence.aborted = True
        if sequence in self._running:
            self._unbatch_all()  # its blocks are counted, and the batch closes up behind it
            self._running.remove(sequence)
            self._free_blocks(sequence)
        else:
            self._waiting.remove(sequence)
        return True

    def timing(self, request_id: str) -> RequestTiming | None:
        """The timing of a request still in the engine, as of the last step ended (a
        decoding request's later tokens are added when it is read again or finishes)."""
        sequence = self._by_id.get(request_id)
        if sequence is None:
            return None
        if sequence.anchor >= 0:
            self._sync(sequence)
        return sequence.timing

    @property
    def idle(self) -> bool:
        return not self._running and not self._waiting

    @property
    def load(self) -> int:
        """Requests running or waiting (what a load-aware router balances)."""
        return len(self._running) + len(self._waiting)

    def stats(self) -> EngineStats:
        return EngineStats(
            running=len(self._running),
            waiting=len(self._waiting),
            kv_usage=self.cache.held_blocks / self.params.num_blocks,
            prompt_tokens=self._prompt_tokens,
            generation_tokens=self._generation_tokens,
            prefix_queried_tokens=self._queried_tokens,
            prefix_hit_tokens=self._hit_tokens,
            preemptions=self._preemptions,
            steps=self._steps,
            finished=self._finished,
        )

    # ---------------------------------------------------------------- one step
    def begin_step(self) -> StepPlan | None:
        """Chooses the next batch; None when there is nothing to do."""
        if self._in_step is not None:
            raise RuntimeError("begin_step: the previous step has not ended")
        budget = self.params.max_batched_tokens
        size = self.params.block_size
        cache = self.cache
        running = self._running
        batched = self._batched
        if batched:
            # The batch comes first in the running order: each of its sequences takes one
            # token of the budget and those at a block boundary one block, unless the budget
            # or the free blocks run out before its last, when the loop below decides.
            due = self._due[self._steps % size]
            if batched > budget or due > cache.available:
                self._unbatch_all()
                batched = 0
            elif due:
                cache.allocate(due)
        preempted: list[_Sequence] = []
        # The step's decoding sequences, their context tokens, prompt tokens computed and
        # the tokens those attend to.
        decoding = batched
        context = self._context + batched
        budget -= batched
        prefill = 0
        pairs = 0.0
        index = batched
        count = len(running)
        # The loop runs once per running sequence outside the batch and step: attributes
        # are read directly (the properties' arithmetic inlined).
        while index < count and budget > 0:
            sequence = running[index]
            computed = sequence.computed
            generated = sequence.generated
            missing = sequence.request.prompt_tokens + generated - computed
            decodes = missing == 1 and generated > 0  # ``_Sequence.decoding``
            pending = missing if missing < budget else budget
            end = computed + pending
            if end > sequence.blocks * size:
                needed = -(-end // size) - sequence.blocks
                # Preemption takes the newest (last) sequence: this one is gone once the
                # list is no longer than its index. The batch, oldest, is never reached.
                while needed > cache.available and index < count:
                    preempted.append(self._preempt_newest())
                    count -= 1
                if index >= count:
                    break  # it was the newest: nothing after it is left to schedule
                cache.allocate(needed)
                sequence.blocks += needed
            if decodes:
                decoding += 1
                context += end
            else:
                prefill += pending
                pairs += prompt_pairs(pending, computed)
            sequence.pending = pending
            budget -= pending
            index += 1
        # The running sequences are scheduled in order, as far as the budget went.
        scheduled = running[:index]
        admitted = [] if preempted else self._admit(budget)
        if not scheduled and not admitted:
            return None
        self._in_step = scheduled[batched:] + admitted
        for sequence in admitted:  # a recomputed sequence may be decoding again
            if sequence.decoding:
                decoding += 1
                context += sequence.num_tokens
            else:
                prefill += sequence.pending
                pairs += prompt_pairs(sequence.pending, sequence.computed)
        return StepPlan(
            cost_s=self.params.step_cost_s(prefill, decoding, context, pairs),
            prefill_tokens=prefill,
            decode_seqs=decoding,
            context_tokens=context,
            prefill_pairs=pairs,
            batch=tuple(scheduled + admitted),
            newly_admitted=tuple(admitted),
            evicted=tuple(preempted),
        )

    def end_step(self, now: float, *, every_token: bool = True) -> StepResult:
        """Completes the step begun last: its sequences' tokens are computed at ``now``.

        With ``every_token`` False the result lists only first tokens (the TTFTs): a
        caller that reads token times from the requests' timings, as a simulator does,
        skips making one ``Token`` per sequence and step. The timings are the same."""
        if self._in_step is None:
            raise RuntimeError("end_step: no step has begun")
        visited, self._in_step = self._in_step, None
        step = self._steps
        self._steps += 1
        self._times.append(now)
        tokens: list[Token] = []
        finished: list[RequestTiming] = []
        batched = self._batched  # all computed by this step (batching waits for its end)
        emitted = batched
        if batched:
            if every_token:
                for sequence in self._running[:batched]:
                    self._sync(sequence)
                    token_s = sequence.token_s
                    tokens.append(
                        Token(
                            sequence.request.request_id,
                            sequence.generated - 1,
                            now,
                            now - token_s[-2],
                            sequence.generated == sequence.request.output_tokens,
                        )
                    )
            self._context += batched
            for sequence in self._ending.pop(step, ()):
                self._unbatch(sequence)
                finished.append(self._finish(sequence, now))
        for sequence in visited:
            if sequence.aborted:
                continue
            before = sequence.computed
            computed = before + sequence.pending
            sequence.computed = computed
            sequence.pending = 0
            request = sequence.request
            prompt = request.prompt_tokens
            # Once a prompt is computed its full blocks are all keyed (``held_keys`` covers
            # ``keys``): only a step that computed prompt tokens can publish.
            if before < prompt and sequence.keys:
                self._publish_full_blocks(sequence)
            index = sequence.generated
            if computed < prompt + index:
                continue  # a prefill chunk: no token yet
            # The sequence emits its next token (inlined: once per sequence and step).
            token_s = sequence.token_s
            generated = index + 1
            last = generated == request.output_tokens
            if index == 0:
                self._prompt_tokens += prompt
                gap = now - sequence.timing.arrival_s
                tokens.append(Token(request.request_id, 0, now, gap, last))
            elif every_token:
                tokens.append(Token(request.request_id, index, now, now - token_s[-1], last))
            sequence.generated = generated
            token_s.append(now)
            emitted += 1
            if last:
                finished.append(self._finish(sequence, now))
        self._generation_tokens += emitted
        self._batch_decoders()
        self._trim_times()
        return StepResult(tuple(tokens), tuple(finished))

    def fast_forward(self, now: float, until_s: float) -> tuple[float, list[RequestTiming]]:
        """Runs, in one call, the decode-only steps that start before ``until_s`` (the
        caller's next arrival), as long as no request waits and no step would preempt:
        exactly the steps ``begin_step``/``end_step`` would run, priced per stretch between
        two finishes instead of per step. Returns the clock after them (``now`` when none
        could run) and the requests they finished. A simulator uses it to cross decode
        stretches; the emulator, which streams every token, does not."""
        clock = now
        finished: list[RequestTiming] = []
        while clock < until_s and self.can_fast_forward:
            # Up to and including the next step that finishes a sequence.
            batch = self._batched
            step = self._steps
            most, most_blocks = self._steps_with_blocks(min(self._ending) - step + 1)
            context = self._context + batch
            # ``step_cost_s(0, batch, context)``, its shared part taken once.
            fixed = self.params.step_cost_before_context_s(0, batch)
            per_context = self.params.decode_s_per_context_token
            ends: list[float] = []
            for _ in range(most):
                if clock >= until_s:
                    break
                clock += fixed + per_context * context
                context += batch
                ends.append(clock)
            if not ends:
                break
            steps = len(ends)
            # Taken at once: the same blocks as step by step.
            grown = most_blocks if steps == most else self._blocks_due(steps)
            if grown:
                self.cache.allocate(grown)
            self._times += ends
            self._steps += steps
            self._context += steps * batch
            self._generation_tokens += steps * batch
            for sequence in self._ending.pop(step + steps - 1, ()):
                self._unbatch(sequence)
                finished.append(self._finish(sequence, clock))
            if steps < most:
                break  # the next arrival comes first
        self._trim_times()
        return clock, finished

    def run_chunks(self, now: float, until_s: float) -> float:
        """Runs, in one call, the steps that end before ``until_s`` and that nobody but the
        clock sees: each computes the batch's tokens and a chunk of the prompt after it that
        takes the rest of the token budget and does not complete it, so no request is
        admitted, preempted, given its first token or finished. Exactly the steps
        ``begin_step``/``end_step`` would run; a request waiting does not stop them (it
        could not be admitted). Returns the clock after them (``now`` when none could run).
        A simulator crosses a long prompt's chunks with it; the caller must not need the
        engine between ``now`` and ``until_s`` (gauges read, a router's prefix lookups)."""
        if self._in_step is not None:
            return now
        params = self.params
        size = params.block_size
        budget = params.max_batched_tokens
        running = self._running
        cache = self.cache
        batch = self._batched
        if batch >= budget or batch >= len(running):
            return now  # the batch takes the budget, or no prompt follows it
        sequence = running[batch]
        request = sequence.request
        left = budget - batch
        # The batch and the prompt stay as they are across these steps: only the step's
        # blocks, the prompt's progress and the batch's context change.
        ending, due_at, times = self._ending, self._due, self._times
        step, context = self._steps, self._context
        clock = now
        while request.prompt_tokens + sequence.generated - sequence.computed > left:
            if step in ending:
                break  # a batched sequence ends: its finish is the caller's to see
            due = due_at[step % size] if batch else 0
            before = sequence.computed
            end = before + left
            needed = max(0, params.blocks_for(end) - sequence.blocks)
            if due + needed > cache.available:
                break  # the step would preempt or empty the batch
            cost = params.step_cost_s(left, batch, context + batch, prompt_pairs(left, before))
            if clock + cost >= until_s:
                break
            clock += cost
            # ``begin_step``: the batch's new blocks, then the chunk's.
            if due:
                cache.allocate(due)
            if needed:
                cache.allocate(needed)
                sequence.blocks += needed
            # ``end_step``: the batch's tokens, the chunk computed and its full blocks keyed.
            step += 1
            times.append(clock)
            context += batch
            sequence.computed = end
            if before < request.prompt_tokens and sequence.keys:
                self._publish_full_blocks(sequence)
        if step == self._steps:
            return now  # no step could run
        self._generation_tokens += (step - self._steps) * batch
        self._steps, self._context = step, context
        self._trim_times()
        return clock

    @property
    def can_fast_forward(self) -> bool:
        """Every running sequence is in the batch and nothing waits: ``fast_forward``
        would run steps (a caller may skip working out until when)."""
        batch = self._batched
        return (
            self._in_step is None
            and not self._waiting
            and 0 < batch == len(self._running)
            and batch <= self.params.max_batched_tokens
        )

    # ---------------------------------------------------------------- the batch
    def _batch_decoders(self) -> None:
        """Adds to the batch the running sequences after it that decode, in order."""
        if not self._batching:
            return
        running = self._running
        size = self.params.block_size
        while self._batched < len(running):
            sequence = running[self._batched]
            generated = sequence.generated
            computed = sequence.computed
            if (
                generated == 0
                or sequence.request.prompt_tokens + generated - computed != 1
                or sequence.blocks != self.params.blocks_for(computed)
            ):
                break
            anchor = self._steps
            sequence.anchor = anchor
            self._due[(anchor - computed) % size] += 1
            last = anchor + sequence.request.output_tokens - generated - 1
            self._ending.setdefault(last, []).append(sequence)
            self._context += computed
            self._batched += 1

    def _sync(self, sequence: _Sequence) -> None:
        """Brings a batched sequence's tokens and token times up to the last step ended."""
        steps = self._steps - sequence.anchor
        if steps:
            start = sequence.anchor - self._times_from
            sequence.token_s += self._times[start : start + steps]
            sequence.computed += steps
            sequence.generated += steps
            sequence.anchor = self._steps

    def _unbatch(self, sequence: _Sequence) -> None:
        """Takes an ending sequence out of the batch's sums (``_ending`` no longer lists it)."""
        self._sync(sequence)
        size = self.params.block_size
        self._due[(sequence.anchor - sequence.computed) % size] -= 1
        self._context -= sequence.computed
        self._batched -= 1
        sequence.anchor = -1
        sequence.blocks = self.params.blocks_for(sequence.computed)

    def _unbatch_all(self) -> None:
        """Empties the batch (its sequences are then visited one by one). During a step its
        sequences join those the step visits at its end, with their token pending."""
        if not self._batched:
            return
        batch = self._running[: self._batched]
        in_step = self._in_step
        pending = 0 if in_step is None else 1
        for sequence in batch:
            self._sync(sequence)
            sequence.anchor = -1
            sequence.pending = pending
            sequence.blocks = self.params.blocks_for(sequence.computed + pending)
        if in_step is not None:
            in_step[:0] = batch
        self._batched = self._context = 0
        self._due = [0] * self.params.block_size
        self._ending.clear()
        self._trim_times()

    def _trim_times(self) -> None:
        """Forgets the step times no batched sequence needs: all of them once the batch is
        empty, and, in a batch that never empties (a long-lived server), once they
        outnumber it, after bringing its sequences up to date."""
        if self._batched and len(self._times) < 1024 + 4 * self._batched:
            return
        for sequence in self._running[: self._batched]:
            self._sync(sequence)
        self._times.clear()
        self._times_from = self._steps

    def _blocks_due(self, steps: int) -> int:
        """New blocks the batch takes over its next ``steps`` steps."""
        size = self.params.block_size
        rounds, rest = divmod(steps, size)
        total = rounds * self._batched
        if rest:
            due = self._due
            first = self._steps % size
            last = first + rest  # the steps' positions within a block: first..last-1
            total += sum(due[first:last])  # the slice stops at the block's end
            if last > size:
                total += sum(due[: last - size])  # and wraps to its start
        return total

    def _steps_with_blocks(self, most: int) -> tuple[int, int]:
        """The most steps (up to ``most``) the free blocks allow the batch, and the blocks
        it takes over them."""
        available = self.cache.available
        low, high = 0, max(0, most)
        blocks = self._blocks_due(high)
        if blocks <= available:
            return high, blocks  # the usual case: one pass
        while low < high:
            mid = (low + high + 1) // 2
            if self._blocks_due(mid) <= available:
                low = mid
            else:
                high = mid - 1
        return low, self._blocks_due(low)

    # ---------------------------------------------------------------- helpers
    def _admit(self, budget: int) -> list[_Sequence]:
        admitted: list[_Sequence] = []
        while self._waiting and budget > 0 and len(self._running) < self.params.max_running:
            sequence = self._waiting[0]
            tokens = sequence.num_tokens
            if sequence.keys:
                # The last token is always computed (it yields the next), so a prompt is
                # never served entirely from the cache.
                reusable = sequence.keys[: (tokens - 1) // self.params.block_size]
                hits = reusable[: self.cache.match(reusable)]
                idle = self.cache.idle_among(hits)
            else:
                hits, idle = (), 0  # nothing to look up
            computed = len(hits) * self.params.block_size
            pending = min(tokens - computed, budget)
            needed = self.params.blocks_for(computed + pending) - len(hits)
            if needed > self.cache.available - idle:
                break
            self._waiting.popleft()
            if hits:
                self.cache.acquire(hits)
            sequence.held_keys = list(hits)
            sequence.blocks = len(hits)
            sequence.computed = computed
            self._take_blocks(sequence, needed)
            sequence.pending = pending
            budget -= pending
            if not sequence.admitted_once:
                sequence.admitted_once = True
                sequence.timing.cached_tokens = computed
                if self.params.prefix_caching:
                    self._queried_tokens += sequence.request.prompt_tokens
                    self._hit_tokens += computed
            self._running.append(sequence)
            admitted.append(sequence)
        return admitted

    def _take_blocks(self, sequence: _Sequence, count: int) -> None:
        if count > 0:
            self.cache.allocate(count)
            sequence.blocks += count

    def _free_blocks(self, sequence: _Sequence) -> None:
        self.cache.release(sequence.held_keys)
        self.cache.free(sequence.blocks - len(sequence.held_keys))
        sequence.held_keys = []
        sequence.blocks = 0
        sequence.computed = 0

    def _preempt_newest(self) -> _Sequence:
        victim = self._running.pop()
        self._free_blocks(victim)
        victim.timing.preemptions += 1
        self._preemptions += 1
        self._waiting.appendleft(victim)
        return victim

    def _publish_full_blocks(self, sequence: _Sequence) -> None:
        """Keys the prompt blocks this step filled, so later requests can reuse them."""
        size = self.params.block_size
        while (
            len(sequence.held_keys) < len(sequence.keys)
            and (len(sequence.held_keys) + 1) * size <= sequence.computed
        ):
            key = sequence.keys[len(sequence.held_keys)]
            self.cache.publish(key)
            sequence.held_keys.append(key)

    def _finish(self, sequence: _Sequence, now: float) -> RequestTiming:
        self._running.remove(sequence)
        self._free_blocks(sequence)
        del self._by_id[sequence.request.request_id]
        sequence.timing.finish_s = now
        self._finished += 1
        return sequence.timing
