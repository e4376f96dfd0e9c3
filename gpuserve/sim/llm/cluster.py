"""Token-level simulation of N LLM replicas behind a router, resized by a scaler.

Each replica runs the engine model of ``gpuserve.llm.engine`` on a virtual clock, step by
step while requests arrive or complete their prompts, and in one stretch while its batch
only decodes (``Engine.fast_forward``) or computes a long prompt's chunks
(``Engine.run_chunks``). The event loop merges the sorted arrivals with a heap of replica
steps, replica start-ups and scrapes, so the cost is per step that changes the batch, not
per token.

* Routing: ``random`` (a Kubernetes Service), ``prefix``: the replica holding the
  longest cached prefix of the request, among those whose load (running + waiting) is
  within ``load_bound`` times the mean plus one; ties go to the least loaded; or
  ``least_loaded``: the replica with the fewest requests running and waiting (an
  endpoint picker that reads the replicas' queues).
* Replicas take ``startup_s`` from creation to serving (instantly for the oracle); a
  removed one leaves the router at once and drains its requests. A replica holds its GPU
  from creation until drained: GPU-seconds count all of that.
* Every ``scrape_interval_s`` the replicas' vLLM-named metrics are scraped as samples
  (``gpuserve.llm.observing``), and the scaler is called with the snapshots so far. A
  replica still starting exports nothing, as a pod whose server has not loaded its model
  answers no scrape (until 2026-12-07 its zeros were scraped too: its engine counted as
  one that served, and its KV usage in the replicas' mean).
"""

from __future__ import annotations

import gc
import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import chain
from typing import Literal

import numpy as np
import numpy.typing as npt

from gpuserve.llm import metrics as vllm
from gpuserve.llm.capacity import TokenObjectives
from gpuserve.llm.engine import Engine, Request, RequestTiming
from gpuserve.llm.kvcache import chain_keys
from gpuserve.llm.observing import VllmSnapshot, snapshot_from_samples
from gpuserve.llm.params import EngineParams
from gpuserve.sim.llm.traces import TokenTrace

Routing = Literal["random", "prefix", "least_loaded"]
_TICK, _READY, _SCRAPE, _EVAL = 0, 1, 2, 3
_TTFT, _TPOT = vllm.TIME_TO_FIRST_TOKEN.name, vllm.TIME_PER_OUTPUT_TOKEN.name
_PROMPTS, _OUTPUTS = "vllm:request_prompt_tokens", "vllm:request_generation_tokens"


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    params: EngineParams
    objectives: TokenObjectives
    startup_s: float = 45.0
    scrape_interval_s: float = 5.0
    routing: Routing = "random"
    load_bound: float = 1.25
    initial_replicas: int = 1
    seed: int = 0


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What a scaler sees: the clock, the replicas, and every scrape so far."""

    now: float
    serving: int  # ready replicas in the router
    starting: int
    snapshots: Sequence[VllmSnapshot]

    @property
    def committed(self) -> int:
        return self.serving + self.starting


class ClusterScaler:
    """A scaler: called every ``interval_s`` (first at ``offset_s``) with the view, it
    returns the replicas it wants (serving + starting), or None to leave them."""

    name = "scaler"
    interval_s = 15.0
    offset_s = 1.0
    instant = False  # new replicas serve at once (the oracle only)

    def target(self, view: ClusterView) -> int | None:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    tpot_s: float  # mean gap between output tokens (0 with one token)
    cached_tokens: int


@dataclass(frozen=True, slots=True)
class ClusterRun:
    policy: str
    objectives: TokenObjectives
    outcomes: tuple[RequestOutcome, ...]  # in arrival order
    gpu_seconds: float
    replicas: tuple[tuple[float, int], ...]  # (time, serving + starting) after each change
    prefix_queried: int
    prefix_hits: int
    preemptions: int
    # Each replica's (created, gone): when it took and gave back its GPU (gone: the run's
    # end for those still held). ``gpu_seconds`` is their sum over the measured span.
    lifetimes: tuple[tuple[float, float], ...] = ()

    def measured_from(self, start: float) -> ClusterRun:
        """The run measured from ``start`` on (a history served before it): the requests
        arriving from then, the GPU time held and the sizes from then. Prefix and
        preemption counters stay the whole run's."""
        before = [size for at, size in self.replicas if at <= start]
        sizes = [(start, before[-1])] if before else []
        return replace(
            self,
            outcomes=tuple(o for o in self.outcomes if o.arrival_s >= start),
            replicas=(*sizes, *((at, size) for at, size in self.replicas if at > start)),
            gpu_seconds=sum(max(0.0, gone - max(made, start)) for made, gone in self.lifetimes),
        )

    def met(self, outcome: RequestOutcome) -> bool:
        return (
            outcome.ttft_s <= self.objectives.ttft_s + 1e-12
            and outcome.tpot_s <= self.objectives.tpot_s + 1e-12
        )

    def attainment(self, start: float = -math.inf, end: float = math.inf) -> float:
        chosen = [o for o in self.outcomes if start <= o.arrival_s < end]
        return sum(map(self.met, chosen)) / len(chosen) if chosen else 1.0

    def ttft_attainment(self) -> float:
        ok = sum(o.ttft_s <= self.objectives.ttft_s + 1e-12 for o in self.outcomes)
        return ok / len(self.outcomes) if self.outcomes else 1.0

    def tpot_attainment(self) -> float:
        ok = sum(o.tpot_s <= self.objectives.tpot_s + 1e-12 for o in self.outcomes)
        return ok / len(self.outcomes) if self.outcomes else 1.0

    def ttft_percentile(self, q: float) -> float:
        values = sorted(o.ttft_s for o in self.outcomes)
        return values[min(len(values) - 1, int(q / 100 * len(values)))] if values else math.nan

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0

    @property
    def hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queried if self.prefix_queried else 0.0

    def goodput_per_gpu(self) -> float:
        """Output tokens of requests within both objectives, per GPU-second."""
        good = sum(o.output_tokens for o in self.outcomes if self.met(o))
        return good / self.gpu_seconds if self.gpu_seconds > 0 else 0.0


class _Replica:
    __slots__ = (
        "created",
        "draining",
        "engine",
        "gone",
        "in_step",
        "index",
        "ready",
        "ticking",
        "upcoming",
    )

    def __init__(self, index: int, params: EngineParams, created: float, ready: float) -> None:
        self.index = index
        self.engine = Engine(params)
        self.created = created
        self.ready = ready
        self.gone: float | None = None
        self.draining = False
        self.in_step = False  # a planned step ends at the pending tick
        self.ticking = False  # a tick is pending
        self.upcoming: deque[float] = deque()  # arrivals drawn for it (random routing)

    @property
    def load(self) -> int:
        return self.engine.load


class _Histogram:
    """Bucket counts and sum of one histogram, over the whole cluster. Observations wait
    until the histogram is read (``take_observed``, at each scrape): values in
    ``observed``, series whose gaps are observed (a request's token times) in
    ``observed_gaps``."""

    __slots__ = ("bounds", "counts", "edges", "observed", "observed_gaps", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.edges = np.asarray(self.bounds)
        self.counts = [0.0] * (len(bounds) + 1)
        self.total = 0.0
        self.observed: list[float] = []
        self.observed_gaps: list[list[float]] = []

    def take_observed(self) -> None:
        """Counts the waiting observations: the counts and the sum (added in order, the
        same float) that adding each as it was made gives."""
        self.add_gaps(self.observed_gaps)
        self.observed_gaps.clear()
        values = self.observed
        if not values:
            return
        self._add_counts(np.searchsorted(self.edges, values, side="left"))
        total = self.total
        for value in values:
            total += value
        self.total = total
        values.clear()

    def _add_counts(
        self, index: npt.NDArray[np.intp], less: npt.NDArray[np.intp] | None = None
    ) -> None:
        """Counts observations by their bucket ``index``, less those indexed in ``less``."""
        buckets = len(self.counts)
        counts = np.bincount(index, minlength=buckets)
        if less is not None:
            counts -= np.bincount(less, minlength=buckets)
        for bucket, count in enumerate(counts):
            self.counts[bucket] += float(count)

    def add_gaps(self, series: list[list[float]]) -> None:
        """The gaps between consecutive values of each series (a simulation's token times,
        gathered between two scrapes), with one pass over the buckets. Each series' sum is
        taken on its own slice and added in order, so the total is the float that adding
        the series one by one gives."""
        if not series:
            return
        lengths = [len(values) for values in series]
        flat = np.fromiter(chain.from_iterable(series), dtype=np.float64, count=sum(lengths))
        diffs = np.diff(flat)
        index = np.searchsorted(self.edges, diffs, side="left")
        # Less the differences across two series (one series' last, the next one's first).
        across = np.cumsum(lengths[:-1], dtype=np.intp) - 1
        self._add_counts(index, less=index[across])
        start = 0
        for length in lengths:
            self.total += float(diffs[start : start + length - 1].sum())
            start += length

    def samples(self, name: str) -> list[tuple[str, dict[str, str], float]]:
        out: list[tuple[str, dict[str, str], float]] = []
        cumulative = 0.0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            cumulative += count
            le = "+Inf" if math.isinf(bound) else str(bound)
            out.append((f"{name}_bucket", {"le": le}, cumulative))
        out.append((f"{name}_sum", {}, self.total))
        out.append((f"{name}_count", {}, cumulative))
        return out


@dataclass
class _Counters:
    """Counters of the replicas that left (live ones are read from their engines)."""

    gone_queried: int = 0
    gone_hits: int = 0
    gone_preemptions: int = 0


def simulate_cluster(
    config: ClusterConfig,
    trace: TokenTrace,
    scaler: ClusterScaler,
    *,
    on_scrape: Callable[[float], None] | None = None,
) -> ClusterRun:
    """Serves every request of ``trace`` and returns what happened.

    The cyclic garbage collector is paused for the run: a simulation makes no reference
    cycles (a collection after one finds none), yet each pass walks every object the
    caller holds, such as a benchmark's earlier runs, which cost 8-13 % of a run."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _Simulation(config, trace, scaler).run(on_scrape)
    finally:
        if collecting:
            gc.enable()


class _Simulation:
    def __init__(self, config: ClusterConfig, trace: TokenTrace, scaler: ClusterScaler) -> None:
        if trace.hashed and trace.block_size != config.params.block_size:
            raise ValueError(
                f"params.block_size: {config.params.block_size} differs from the "
                f"trace's {trace.block_size}-token hash blocks"
            )
        self.config = config
        self.trace = trace
        self.scaler = scaler
        self.rng = random.Random(config.seed)
        self.replicas: list[_Replica] = []
        self.heap: list[tuple[float, int, int, int]] = []
        self.sequence = 0
        self.timings: dict[str, RequestTiming] = {}
        self.first_tokens: dict[str, float] = {}
        self.counters = _Counters()
        sizes = vllm.one_two_five_buckets(config.params.max_model_len)
        self.histograms = {
            _TTFT: _Histogram(vllm.TTFT_BUCKETS),
            _TPOT: _Histogram(vllm.TPOT_BUCKETS),
            _PROMPTS: _Histogram(sizes),
            _OUTPUTS: _Histogram(sizes),
        }
        # Each histogram's waiting observations, one lookup nearer.
        self.tpot_observed = self.histograms[_TPOT].observed_gaps
        self.ttft_observed = self.histograms[_TTFT].observed
        self.prompts_observed = self.histograms[_PROMPTS].observed
        self.outputs_observed = self.histograms[_OUTPUTS].observed
        self.next_scrape = 0.0
        self.snapshots: list[VllmSnapshot] = []
        self.size_log: list[tuple[float, int]] = []
        self.next_arrival = 0
        # Random routing depends only on which replicas serve, and that set changes only
        # at an evaluation (readiness is checked at each arrival's own time): so the
        # replicas of the arrivals before the next evaluation can be drawn ahead, in
        # order, and a replica's decode stretch runs on until its own next arrival
        # instead of the cluster's.
        self.routes: deque[_Replica] = deque()  # drawn for next_arrival, next_arrival + 1...
        # ``_serving``'s last answer: (from, until, replicas).
        self.kept_serving: tuple[float, float, list[_Replica]] | None = None
        self.next_eval = math.inf
        for _ in range(config.initial_replicas):
            self._add_replica(0.0, instant=True)
        self.size_log.append((0.0, config.initial_replicas))
        self._push(0.0, _SCRAPE, -1)
        if scaler.interval_s > 0:
            self._push(scaler.offset_s, _EVAL, -1)
            self.next_eval = scaler.offset_s

    # ------------------------------------------------------------------ loop
    def run(self, on_scrape: Callable[[float], None] | None) -> ClusterRun:
        requests = self.trace.requests
        count = len(requests)
        heap = self.heap
        while True:
            if self.next_arrival < count:
                arrival = requests[self.next_arrival].arrival_s
            elif self._busy():
                arrival = math.inf
            else:
                break
            if heap and heap[0][0] < arrival:
                at, _, kind, index = heapq.heappop(heap)
                if kind == _TICK:
                    self._tick(self.replicas[index], at)
                elif kind == _SCRAPE:
                    self._scrape(at)
                    if on_scrape is not None:
                        on_scrape(at)
                elif kind == _EVAL:
                    self._evaluate(at)
            else:
                self._arrive(arrival)
        return self._result()

    def _busy(self) -> bool:
        return any(not r.engine.idle for r in self.replicas if r.gone is None)

    def _push(self, at: float, kind: int, index: int) -> None:
        self.sequence += 1
        heapq.heappush(self.heap, (at, self.sequence, kind, index))

    # ------------------------------------------------------------------ requests
    def _arrive(self, now: float) -> None:
        given = self.trace.requests[self.next_arrival]
        self.next_arrival += 1
        if self.routes:
            replica = self.routes.popleft()
            replica.upcoming.popleft()
        else:
            serving = self._serving(now)
            if not serving:  # nothing ready yet: the soonest to be (requests queue at it)
                serving = [min((r for r in self.replicas if r.gone is None), key=lambda r: r.ready)]
            replica = self._route(serving, given.block_hashes)
        rid = str(self.next_arrival - 1)
        replica.engine.add(
            Request(rid, given.prompt_tokens, given.output_tokens, now, given.block_hashes)
        )
        if not replica.ticking:
            self._schedule_tick(replica, max(now, replica.ready))

    def _serving(self, now: float) -> list[_Replica]:
        """The replicas that take requests at ``now`` (the caller does not change the list).
        Kept from one call to the next until a replica becomes ready, is added or drains."""
        kept = self.kept_serving
        if kept is not None and kept[0] <= now < kept[1]:
            return kept[2]
        live = [r for r in self.replicas if r.gone is None and not r.draining]
        serving = [r for r in live if r.ready <= now]
        upcoming = min((r.ready for r in live if r.ready > now), default=math.inf)
        self.kept_serving = (now, upcoming, serving)
        return serving

    def _next_arrival_for(self, replica: _Replica) -> float:
        """When the next request that may go to ``replica`` arrives: under random routing
        the next one drawn for it (drawing ahead up to the next evaluation), otherwise
        the next arrival."""
        requests = self.trace.requests
        if self.config.routing != "random":
            return self._next_arrival_time()
        mine = replica.upcoming
        drawn = self.next_arrival + len(self.routes)
        while not mine and drawn < len(requests) and requests[drawn].arrival_s < self.next_eval:
            at = requests[drawn].arrival_s
            serving = self._serving(at)
            if not serving:
                break  # the fallback depends on replicas leaving meanwhile: draw it then
            chosen = self._route(serving, requests[drawn].block_hashes)
            self.routes.append(chosen)
            chosen.upcoming.append(at)
            drawn += 1
        if mine:
            return mine[0]
        return requests[drawn].arrival_s if drawn < len(requests) else math.inf

    def _route(self, serving: list[_Replica], hashes: tuple[int, ...]) -> _Replica:
        if self.config.routing == "least_loaded":
            return min(serving, key=lambda r: (r.load, r.index))
        if self.config.routing == "random" or not hashes or len(serving) == 1:
            return serving[self.rng.randrange(len(serving))]
        keys = chain_keys(hashes)
        mean = sum(r.load for r in serving) / len(serving)
        allowed = [r for r in serving if r.load <= self.config.load_bound * mean + 1]
        return max(allowed, key=lambda r: (r.engine.cache.match(keys), -r.load, -r.index))

    def _schedule_tick(self, replica: _Replica, at: float) -> None:
        replica.ticking = True
        self._push(at, _TICK, replica.index)

    def _tick(self, replica: _Replica, now: float) -> None:
        replica.ticking = False
        engine = replica.engine
        if replica.in_step:
            replica.in_step = False
            result = engine.end_step(now, every_token=False)  # first tokens only
            if result.tokens:
                self.ttft_observed += [token.gap_s for token in result.tokens]
            for timing in result.finished:
                self._finish(timing)
        if engine.can_fast_forward:
            # Gauges are read at scrapes: a stretch does not cross one.
            until = min(self._next_arrival_for(replica), self.next_scrape)
            clock, finished = engine.fast_forward(now, until)
            for timing in finished:
                self._finish(timing)
            if clock > now:
                self._schedule_tick(replica, clock)
                return
        else:
            # A long prompt's chunks: until the next scrape reads the gauges, or, where
            # the router looks into the replicas' caches, the next arrival.
            until = self.next_scrape
            if self.config.routing != "random":
                until = min(until, self._next_arrival_time())
            clock = engine.run_chunks(now, until)
            if clock > now:
                self._schedule_tick(replica, clock)
                return
        plan = engine.begin_step()
        if plan is not None:
            replica.in_step = True
            self._schedule_tick(replica, now + plan.cost_s)
        elif replica.draining:
            self._retire(replica, now)

    def _next_arrival_time(self) -> float:
        requests = self.trace.requests
        return (
            requests[self.next_arrival].arrival_s if self.next_arrival < len(requests) else math.inf
        )

    def _finish(self, timing: RequestTiming) -> None:
        self.timings[timing.request_id] = timing
        tokens = timing.token_s
        if len(tokens) > 1:
            # Read only at scrapes: the gaps are added there, all at once.
            self.tpot_observed.append(tokens)
        self.prompts_observed.append(float(timing.prompt_tokens))
        self.outputs_observed.append(float(len(tokens)))

    # ------------------------------------------------------------------ replicas
    def _committed(self) -> int:
        return sum(1 for r in self.replicas if r.gone is None and not r.draining)

    def _add_replica(self, now: float, *, instant: bool) -> None:
        ready = now if instant else now + self.config.startup_s
        replica = _Replica(len(self.replicas), self.config.params, now, ready)
        self.replicas.append(replica)
        self.kept_serving = None
        if ready > now:
            self._push(ready, _READY, replica.index)

    def _remove_one(self, now: float) -> None:
        live = [r for r in self.replicas if r.gone is None and not r.draining]
        # Starting replicas first (they serve nobody yet), then the newest serving one.
        victim = max(live, key=lambda r: (r.ready > now, r.created))
        victim.draining = True
        self.kept_serving = None
        if victim.engine.idle and not victim.ticking:
            self._retire(victim, now)

    def _retire(self, replica: _Replica, now: float) -> None:
        replica.gone = now
        stats = replica.engine.stats()
        self.counters.gone_queried += stats.prefix_queried_tokens
        self.counters.gone_hits += stats.prefix_hit_tokens
        self.counters.gone_preemptions += stats.preemptions

    def _resize(self, target: int, now: float, instant: bool) -> None:
        target = max(1, target)
        committed = self._committed()
        for _ in range(target - committed):
            self._add_replica(now, instant=instant)
        for _ in range(committed - target):
            self._remove_one(now)
        if target != committed:
            self.size_log.append((now, target))

    # ------------------------------------------------------------------ metrics
    def _scrape(self, now: float) -> None:
        for histogram in self.histograms.values():
            histogram.take_observed()
        self.snapshots.append(snapshot_from_samples(now, self._samples(now)))
        self.next_scrape = now + self.config.scrape_interval_s
        if self._busy() or self.next_arrival < len(self.trace.requests):
            self._push(self.next_scrape, _SCRAPE, -1)

    def _evaluate(self, now: float) -> None:
        serving = len(self._serving(now))
        view = ClusterView(now, serving, self._committed() - serving, self.snapshots)
        wanted = self.scaler.target(view)
        if wanted is not None:
            self._resize(wanted, now, self.scaler.instant)
        self.next_eval = math.inf
        if self._busy() or self.next_arrival < len(self.trace.requests):
            self._push(now + self.scaler.interval_s, _EVAL, -1)
            self.next_eval = now + self.scaler.interval_s

    def _samples(self, now: float) -> list[tuple[str, dict[str, str], float]]:
        counters = self.counters
        queried, hits, preempted = (
            counters.gone_queried,
            counters.gone_hits,
            counters.gone_preemptions,
        )
        samples: list[tuple[str, dict[str, str], float]] = []
        for replica in self.replicas:
            if replica.gone is not None or replica.ready > now:
                continue
            stats = replica.engine.stats()
            queried += stats.prefix_queried_tokens
            hits += stats.prefix_hit_tokens
            preempted += stats.preemptions
            label = {"replica": str(replica.index)}
            samples += [
                (vllm.NUM_REQUESTS_RUNNING.name, label, float(stats.running)),
                (vllm.NUM_REQUESTS_WAITING.name, label, float(stats.waiting)),
                (vllm.KV_CACHE_USAGE.name, label, stats.kv_usage),
            ]
        samples += [
            (vllm.PREFIX_CACHE_QUERIES.name, {}, float(queried)),
            (vllm.PREFIX_CACHE_HITS.name, {}, float(hits)),
            (vllm.NUM_PREEMPTIONS.name, {}, float(preempted)),
        ]
        for name, histogram in self.histograms.items():
            samples += histogram.samples(name)
        return samples

    # ------------------------------------------------------------------ result
    def _result(self) -> ClusterRun:
        end = max((t.token_s[-1] for t in self.timings.values()), default=0.0)
        outcomes = []
        for index, given in enumerate(self.trace.requests):
            timing = self.timings[str(index)]
            tokens = timing.token_s
            tpot = (tokens[-1] - tokens[0]) / (len(tokens) - 1) if len(tokens) > 1 else 0.0
            outcomes.append(
                RequestOutcome(
                    given.arrival_s,
                    given.prompt_tokens,
                    given.output_tokens,
                    tokens[0] - given.arrival_s,
                    tpot,
                    timing.cached_tokens,
                )
            )
        lifetimes = tuple((r.created, r.gone if r.gone is not None else end) for r in self.replicas)
        gpu = sum(gone - made for made, gone in lifetimes)
        counters = self.counters
        queried = counters.gone_queried + sum(
            r.engine.stats().prefix_queried_tokens for r in self.replicas if r.gone is None
        )
        hits = counters.gone_hits + sum(
            r.engine.stats().prefix_hit_tokens for r in self.replicas if r.gone is None
        )
        preempted = counters.gone_preemptions + sum(
            r.engine.stats().preemptions for r in self.replicas if r.gone is None
        )
        return ClusterRun(
            self.scaler.name,
            self.config.objectives,
            tuple(outcomes),
            gpu,
            tuple(self.size_log),
            queried,
            hits,
            preempted,
            lifetimes,
        )
