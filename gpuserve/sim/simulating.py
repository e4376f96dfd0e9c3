"""Discrete-event simulation of Triton pods behind a Service, scaled by an autoscaler.

Event loop on a heap (arrivals are merged from the sorted workload, not pushed), so the
cost is per event, never per tick. What is modelled, following Triton's documentation of
the dynamic batcher (docs/autoscaling.md has the full list):

* One scheduler queue per pod, shared by the model's instances; one FIFO per priority
  level (level 1 first), each with a queue policy: max_queue_size rejects at enqueue;
  a timeout either rejects the request or moves it behind the level's live requests
  (DELAY), where it still runs before lower levels.
* When an instance is free the batcher walks the queue in order, adding requests while
  the batch stays <= max_batch_size items (order is kept: it stops at the first request
  that does not fit). It sends at once when the batch cannot grow (max batch or the
  largest preferred size reached: it then sends the largest preferred prefix), when
  max_queue_delay is 0, or when the oldest request has waited max_queue_delay; before
  that it sends a batch of a preferred size if it has one, else it waits for more
  requests or the delay to expire.
* With prefetching (Triton's behaviour without priorities or a queue policy) the batcher
  forms the next batch by the same rules while the instances are busy and queues it; later
  arrivals join that waiting batch only in groups that reach the next preferred size.
* Without dynamic batching every request executes alone.
* An execution of n items in r requests takes
  (per_batch + n * per_item) * precision_factor / speed + r * per_request, times an
  optional log-normal jitter factor (mean 1); a class may override per_request and the
  jitter.
* Pods start after their class's cold start; warm-pool pods are ready but outside the
  Service; promotion puts them in after the class's warm start (endpoint propagation).
  Removed pods leave the endpoints at once and drain; if the warm pool is short they
  return to it instead of terminating.
* A scaler's order may name ready pods to route around until its next order, from the
  per-pod queue depths of the last scrape (``gpuserve.autoscaling.shedding``): arrivals go
  to the other ready pods, as the operator's role label takes them out of the Service.
* Every pod holds a GPU from creation to termination: GPU-seconds and cost count
  starting, warm, serving and draining pods alike.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import replace

from gpuserve.autoscaling.allocating import UNBOUNDED
from gpuserve.autoscaling.pools import ClassPool, PoolState
from gpuserve.autoscaling.shedding import PodQueue
from gpuserve.placement.planning import ClassCapacity, PoolNow, place
from gpuserve.sim.config import SimConfig
from gpuserve.sim.results import SimResult, TimelinePoint
from gpuserve.sim.scalers import ScaleOrder, Scaler, ScalerView, resize_to
from gpuserve.sim.scraping import MetricStore, Scrape
from gpuserve.sim.workload import Workload

_QUEUED, _RUNNING, _DONE, _REJECTED = 0, 1, 2, 3
_SERVING, _WARM, _PROMOTING, _DRAINING, _DRAIN_TO_WARM, _GONE = range(6)
_EV_DONE, _EV_TIMER, _EV_TIMEOUT, _EV_READY, _EV_PROMOTED, _EV_SCRAPE, _EV_EVAL, _EV_TICK = range(8)
_EPS = 1e-12
_IDLE_WAIT = 0.5  # Triton's batcher thread sleeps this long when its queue is empty


class _Pod:
    __slots__ = (
        "busy",
        "cls",
        "compute_time",
        "created",
        "execs",
        "failure",
        "free",
        "gone",
        "id",
        "items",
        "level_live",
        "next_pref",
        "open",
        "pending",
        "q_items",
        "queue_time",
        "queues",
        "ready",
        "ready_at",
        "recent",
        "request_time",
        "rlq",
        "role",
        "saturated",
        "speed",
        "success",
        "timer_at",
        "timer_seq",
    )

    def __init__(
        self, pid: int, cls: int, speed: float, levels: int, instances: int, now: float
    ) -> None:
        self.id = pid
        self.cls = cls
        self.speed = speed
        self.queues: list[tuple[deque[int], deque[int]]] = [
            (deque(), deque()) for _ in range(levels)
        ]
        self.level_live = [0] * levels
        self.pending = 0
        self.busy = 0
        self.free = instances
        self.role = _SERVING
        self.ready = False
        self.created = now
        self.ready_at = math.inf
        self.gone = math.inf
        self.timer_at = math.inf
        self.timer_seq = 0
        self.recent: deque[tuple[float, float]] = deque()
        self.success = self.failure = self.items = self.execs = 0
        self.request_time = self.queue_time = self.compute_time = 0.0
        # Prefetching batcher: the batch being formed (None when the last one was taken by
        # an instance or sealed), batches waiting for an instance, items still in the
        # scheduler queue, the item count at which an arrival wakes the batcher.
        self.open: list[int] | None = None
        self.rlq: deque[list[int]] = deque()
        self.q_items = 0
        self.next_pref = 0
        self.saturated = False


def _pod_name(pod: _Pod) -> str:
    return f"pod-{pod.id}"


class Simulation:
    """One run of a workload through simulated pods under one scaler."""

    def __init__(self, *, config: SimConfig, workload: Workload, scaler: Scaler) -> None:
        self.cfg = config
        self.workload = workload
        self.scaler = scaler
        # Standby pods kept: the configured size until a policy with an automatic warm
        # pool says otherwise (the operator resizes its standby Deployments the same way).
        self.warm_target = config.warm_pool
        self.rng = random.Random(config.seed)
        n = len(workload)
        self.arrival = workload.arrivals
        self.items = workload.items
        b = config.batcher
        self.level = (
            tuple(min(b.levels, max(1, p)) - 1 for p in workload.priorities)
            if workload.priorities and b.priority_levels > 0
            else (max(0, min(b.levels, b.default_priority) - 1),) * n
        )
        self.status = [_QUEUED] * n
        self.qslot = [0] * n
        self.enqueued = [0.0] * n
        self.started = [0.0] * n
        self.latency = [math.inf] * n
        self.pod_of: list[_Pod | None] = [None] * n
        self.policies = tuple(b.policy_for(lv + 1) for lv in range(b.levels))
        self.prefs = frozenset(b.preferred_batch_sizes)
        self.max_pref = max(b.preferred_batch_sizes) if b.preferred_batch_sizes else 0
        self.prefetch = b.prefetching
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.pods: list[_Pod] = []
        self.lb: list[_Pod] = []
        self.shed: frozenset[int] = frozenset()  # pods routed around until the next order
        self.queues: tuple[PodQueue, ...] = ()  # the ready pods' queues, as last scraped
        self.rr = 0
        self.store = MetricStore(rate_window=config.rate_window)
        self.in_system = 0
        self.area = 0.0
        self.area_at = 0.0
        self.timeline: list[TimelinePoint] = []
        self.events: list[tuple[float, str]] = []
        self.scale_events = 0
        self.arrived = 0
        self.last_timeline_arrivals = 0

    # ------------------------------------------------------------------ driver

    def run(self) -> SimResult:
        cfg = self.cfg
        # Initial pods are placed by the same rule as later ones (preference order within
        # each class's capacity), then the warm pool on what is left.
        first = resize_to(self._pools(0.0), cfg.initial_replicas, reason="start", instant=True)
        self._apply(first, 0.0)
        self._maintain_warm(0.0, instant=True)
        self._push(0.0, _EV_SCRAPE, None)
        self._push(0.0, _EV_TICK, None)
        self._push(self.scaler.offset, _EV_EVAL, None)
        arrivals = self.arrival
        n = len(arrivals)
        end = arrivals[-1] if n else 0.0
        i = 0
        heap = self.heap
        while True:
            next_arrival = arrivals[i] if i < n else math.inf
            if heap and heap[0][0] <= next_arrival:
                now, _, kind, payload = heapq.heappop(heap)
                if kind in (_EV_SCRAPE, _EV_EVAL, _EV_TICK) and now > end and self._idle(i):
                    break
                self._handle(now, kind, payload)
            elif i < n:
                self._arrive(i, next_arrival)
                i += 1
            else:
                break
        finish = max(end, max((p.gone for p in self.pods if p.gone < math.inf), default=0.0))
        finish = max(finish, self.area_at)
        return self._result(finish)

    def _idle(self, next_index: int) -> bool:
        return next_index >= len(self.arrival) and self.in_system == 0

    def _push(self, at: float, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, kind, payload))

    def _handle(self, now: float, kind: int, payload: object) -> None:
        if kind == _EV_DONE:
            assert isinstance(payload, tuple)
            self._complete(now, payload)
        elif kind == _EV_TIMER:
            assert isinstance(payload, tuple)
            pod, seq = payload
            if pod.timer_seq == seq and pod.role != _GONE:
                pod.timer_at = math.inf
                self._dispatch(pod, now)
        elif kind == _EV_TIMEOUT:
            assert isinstance(payload, int)
            self._timeout(now, payload)
        elif kind == _EV_READY:
            assert isinstance(payload, _Pod)
            self._pod_ready(payload, now)
        elif kind == _EV_PROMOTED:
            assert isinstance(payload, _Pod)
            if payload.role == _PROMOTING:
                payload.role = _SERVING
                self.lb.append(payload)
        elif kind == _EV_SCRAPE:
            self._scrape(now)
            self._push(now + self.cfg.scrape_interval, _EV_SCRAPE, None)
        elif kind == _EV_TICK:
            self._account(now)
            self.store.record_area(now, self.area)
            self._push(now + 1.0, _EV_TICK, None)
        elif kind == _EV_EVAL:
            self._evaluate(now)
            self._push(now + self.scaler.interval, _EV_EVAL, None)

    # ------------------------------------------------------------------ requests

    def _account(self, now: float) -> None:
        if now > self.area_at:
            self.area += self.in_system * (now - self.area_at)
            self.area_at = now

    def _arrive(self, r: int, now: float) -> None:
        self.arrived += 1
        b = self.cfg.batcher
        if b.batching and self.items[r] > b.max_batch_size:
            self.status[r] = _REJECTED  # Triton refuses a batch larger than max_batch_size
            return
        pod = self._route()
        if pod is None:
            self.status[r] = _REJECTED  # no endpoints: connection refused
            return
        lv = self.level[r]
        policy = self.policies[lv]
        if policy.max_queue_size and pod.level_live[lv] >= policy.max_queue_size:
            self.status[r] = _REJECTED  # queue full (Triton counts no failure for this)
            return
        self._account(now)
        self.in_system += 1
        pod.queues[lv][0].append(r)
        pod.level_live[lv] += 1
        pod.pending += 1
        self.enqueued[r] = now
        self.pod_of[r] = pod
        if policy.timeout > 0:
            self._push(now + policy.timeout, _EV_TIMEOUT, r)
        if not self.prefetch:
            self._dispatch(pod, now)
            return
        pod.q_items += self.items[r]
        # Triton's Enqueue wakes the batcher only when a batch can be started or the queue
        # has reached the next preferred size of the batch already waiting.
        if self._slot_free(pod) and (
            pod.open is None or pod.saturated or pod.q_items >= pod.next_pref
        ):
            self._dispatch(pod, now)

    def _route(self) -> _Pod | None:
        lb = self.lb
        if not lb:
            return None
        if self.shed:
            lb = [p for p in lb if p.id not in self.shed] or lb
        mode = self.cfg.balancing
        if mode == "random":
            return lb[self.rng.randrange(len(lb))]
        if mode == "round_robin":
            self.rr = (self.rr + 1) % len(lb)
            return lb[self.rr]
        return min(lb, key=lambda p: p.pending + p.busy)

    def _timeout(self, now: float, r: int) -> None:
        pod = self.pod_of[r]
        if self.status[r] != _QUEUED or pod is None or self.qslot[r] != 0:
            return
        lv = self.level[r]
        if self.policies[lv].action == "delay":
            self.qslot[r] = 1  # the entry in the normal FIFO is now dead
            pod.queues[lv][1].append(r)
            return
        self._account(now)
        self.status[r] = _REJECTED
        self.in_system -= 1
        pod.pending -= 1
        pod.level_live[lv] -= 1
        pod.failure += 1
        self._maybe_drained(pod, now)

    def _dispatch(self, pod: _Pod, now: float) -> None:
        if self.prefetch:
            self._run_waiting(pod, now)
            self._batcher(pod, now)
            return
        while pod.free > 0 and pod.pending > 0:
            batch = self._form_batch(pod, now)
            if batch is None:
                return
            self._execute(pod, batch, now)

    def _live_front(self, q: deque[int], slot: int) -> int | None:
        status, qslot = self.status, self.qslot
        while q and (status[q[0]] != _QUEUED or qslot[q[0]] != slot):
            q.popleft()
        return q[0] if q else None

    def _form_batch(self, pod: _Pod, now: float) -> list[int] | None:
        b = self.cfg.batcher
        status, qslot, items = self.status, self.qslot, self.items
        oldest = math.inf
        for queues in pod.queues:
            for slot in (0, 1):
                head = self._live_front(queues[slot], slot)
                if head is not None and self.enqueued[head] < oldest:
                    oldest = self.enqueued[head]
        if not b.batching:
            for queues in pod.queues:
                for slot in (0, 1):
                    head = self._live_front(queues[slot], slot)
                    if head is not None:
                        queues[slot].popleft()
                        return [head]
            return None
        limit = b.max_batch_size
        top = self.max_pref or limit
        batch: list[int] = []
        cum = best = 0
        full = False
        for queues in pod.queues:
            for slot in (0, 1):
                for r in queues[slot]:
                    if status[r] != _QUEUED or qslot[r] != slot:
                        continue
                    size = items[r]
                    if cum + size > limit:
                        full = True
                        break
                    batch.append(r)
                    cum += size
                    if cum in self.prefs:
                        best = len(batch)
                    if cum >= top:
                        full = True
                        break
                if full:
                    break
            if full:
                break
        if not batch:
            return None
        delay = b.max_queue_delay
        if full:
            take = best or len(batch)
        elif delay <= 0 or now + _EPS >= oldest + delay:
            take = len(batch)
        elif best:
            take = best
        else:
            wake = oldest + delay
            if wake < pod.timer_at - _EPS:
                pod.timer_at = wake
                pod.timer_seq += 1
                self._push(wake, _EV_TIMER, (pod, pod.timer_seq))
            return None
        chosen = batch[:take]
        for r in chosen:
            queues = pod.queues[self.level[r]]
            slot = qslot[r]
            self._live_front(queues[slot], slot)
            queues[slot].popleft()
        return chosen

    # ------------------------------------------------------------------ prefetching

    def _slot_free(self, pod: _Pod) -> bool:
        return len(pod.rlq) < 2 * self.cfg.instances

    def _run_waiting(self, pod: _Pod, now: float) -> None:
        """Free instances take the batches waiting for them, oldest first."""
        while pod.free > 0 and pod.rlq:
            batch = pod.rlq.popleft()
            if batch is pod.open:
                pod.open = None
            self._execute(pod, batch, now)

    def _arm(self, pod: _Pod, at: float) -> None:
        pod.timer_at = at
        pod.timer_seq += 1
        self._push(at, _EV_TIMER, (pod, pod.timer_seq))

    def _batcher(self, pod: _Pod, now: float) -> None:
        """One wake-up of Triton's batcher thread with payload prefetching: it moves queued
        requests into the batch being formed (queued for an instance as soon as it has
        one), starts a new batch when the last one was taken or is full, and sleeps until
        the queue delay expires, an arrival wakes it, or an instance takes a batch."""
        queue = pod.queues[0][0]
        while True:
            if pod.open is None or pod.saturated:
                pod.open, pod.saturated, pod.next_pref = [], False, 0
            if self._live_front(queue, 0) is None:
                self._arm(pod, now + _IDLE_WAIT)
                return
            if not self._slot_free(pod):
                return  # an instance taking a batch wakes the batcher again
            wait = self._grow(pod, queue, now)
            if wait is not None:
                self._arm(pod, wait)
                return
            self._run_waiting(pod, now)

    def _grow(self, pod: _Pod, queue: deque[int], now: float) -> float | None:
        """Triton's GetDynamicBatch on top of the batch being formed: moves requests from
        the queue into it and returns None, or returns when to look again."""
        b = self.cfg.batcher
        items, prefs, batch = self.items, self.prefs, pod.open
        assert batch is not None
        limit = b.max_batch_size
        top = self.max_pref or limit
        have = sum(items[r] for r in batch)
        pending = count = best = 0
        send_now = False
        for r in queue:
            size = items[r]
            if have + pending > 0:
                if have + pending + size > top and best == 0:
                    best = count
                    pod.saturated = True
                if have + pending + size > limit:
                    send_now = True
                    break
            pending += size
            count += 1
            if have + pending in prefs:
                best = count
        delay = b.max_queue_delay
        oldest = self.enqueued[queue[0]]
        exceeded = delay > 0 and now + _EPS >= oldest + delay
        if best and not exceeded:
            take = best
            if delay <= 0:
                pod.saturated = True
        elif send_now or have + pending >= top:
            pod.saturated = True
            take = count
        elif exceeded or delay <= 0:
            take = count
        else:
            above = [s for s in sorted(prefs) if s > have + pending]
            nxt = above[0] if above else (min(prefs) if prefs else 0)
            pod.next_pref = nxt - have if nxt else 0
            if pod.saturated or have == 0 or have in prefs:
                return oldest + delay
            take = count
        for _ in range(take):
            r = queue.popleft()
            batch.append(r)
            pod.q_items -= items[r]
        if batch and not any(w is batch for w in pod.rlq):
            pod.rlq.append(batch)
        return None

    def _execute(self, pod: _Pod, batch: list[int], now: float) -> None:
        svc = self.cfg.service
        size = 0
        for r in batch:
            size += self.items[r]
            self.status[r] = _RUNNING
            self.started[r] = now
            pod.level_live[self.level[r]] -= 1
        pool = self.cfg.classes[pod.cls]
        if pool.per_batch is not None and pool.per_item is not None:
            duration = pool.per_batch + pool.per_item * size
        else:
            duration = (svc.per_batch + svc.per_item * size) * svc.precision_factor / pod.speed
        per_request = svc.per_request if pool.per_request is None else pool.per_request
        duration += per_request * len(batch)
        cv = svc.jitter_cv if pool.jitter_cv is None else pool.jitter_cv
        if cv > 0:
            duration *= self._jitter(cv)
        pod.pending -= len(batch)
        pod.busy += len(batch)
        pod.free -= 1
        pod.timer_at = math.inf
        self._push(now + duration, _EV_DONE, (pod, batch, duration, size))

    def _jitter(self, cv: float) -> float:
        """A log-normal factor with mean 1 and coefficient of variation ``cv``."""
        sigma = math.sqrt(math.log1p(cv * cv))
        return math.exp(self.rng.gauss(-sigma * sigma / 2, sigma))

    def _complete(self, now: float, payload: tuple[object, ...]) -> None:
        pod, batch, duration, size = payload
        assert isinstance(pod, _Pod) and isinstance(batch, list)
        assert isinstance(duration, float) and isinstance(size, int)
        self._account(now)
        overhead = self.cfg.latency_overhead
        for r in batch:
            self.status[r] = _DONE
            self.latency[r] = now - self.arrival[r] + overhead
            server_time = now - self.enqueued[r]
            pod.recent.append((now, server_time))
            pod.request_time += server_time
            pod.queue_time += self.started[r] - self.enqueued[r]
            pod.compute_time += duration
        n = len(batch)
        pod.success += n
        pod.items += size
        pod.execs += 1
        pod.busy -= n
        pod.free += 1
        self.in_system -= n
        if not self._maybe_drained(pod, now):
            self._dispatch(pod, now)

    # ------------------------------------------------------------------ pods

    def _start_pod(self, cls: int, role: int, now: float, *, instant: bool) -> _Pod | None:
        pool = self.cfg.classes[cls]
        if pool.capacity is not None and self._active(cls) >= pool.capacity:
            return None
        pod = _Pod(
            len(self.pods), cls, pool.speed, self.cfg.batcher.levels, self.cfg.instances, now
        )
        pod.role = role
        self.pods.append(pod)
        if instant:
            self._pod_ready(pod, now)
        else:
            pod.ready_at = now + pool.cold_start
            self._push(pod.ready_at, _EV_READY, pod)
        return pod

    def _active(self, cls: int) -> int:
        return sum(1 for p in self.pods if p.cls == cls and p.role != _GONE)

    def _pod_ready(self, pod: _Pod, now: float) -> None:
        if pod.role == _GONE:
            return
        pod.ready = True
        pod.ready_at = now
        if pod.role == _SERVING:
            self.lb.append(pod)

    def _promote(self, pod: _Pod, now: float, *, instant: bool) -> None:
        delay = 0.0 if instant else self.cfg.classes[pod.cls].warm_start
        if delay <= 0:
            pod.role = _SERVING
            self.lb.append(pod)
        else:
            pod.role = _PROMOTING
            self._push(now + delay, _EV_PROMOTED, pod)

    def _remove(self, pod: _Pod, now: float) -> None:
        to_warm = self._warm_count() < self.warm_target
        if not pod.ready:
            self._terminate(pod, now)
        elif pod.role == _PROMOTING:
            pod.role = _WARM if to_warm else _GONE
            if pod.role == _GONE:
                self._terminate(pod, now)
        elif pod.role == _SERVING:
            self.lb.remove(pod)
            pod.role = _DRAIN_TO_WARM if to_warm else _DRAINING
            self._maybe_drained(pod, now)

    def _maybe_drained(self, pod: _Pod, now: float) -> bool:
        if pod.role not in (_DRAINING, _DRAIN_TO_WARM) or pod.pending or pod.busy:
            return False
        if pod.role == _DRAIN_TO_WARM:
            pod.role = _WARM
        else:
            self._terminate(pod, now)
        return True

    def _terminate(self, pod: _Pod, now: float) -> None:
        pod.role = _GONE
        pod.gone = now

    def _warm_count(self) -> int:
        return sum(1 for p in self.pods if p.role in (_WARM, _DRAIN_TO_WARM))

    def _maintain_warm(self, now: float, *, instant: bool = False) -> None:
        """Keep ``warm_pool`` warm pods as the operator sizes its standby Deployments:
        placed in preference order on the capacity the service's other pods leave."""
        classes = self.cfg.classes
        order = [pool.name for pool in classes]
        warm_now: dict[str, PoolNow] = {}
        free: dict[str, ClassCapacity] = {}
        for ci, pool in enumerate(classes):
            warm = sum(1 for p in self.pods if p.cls == ci and p.role in (_WARM, _DRAIN_TO_WARM))
            room = UNBOUNDED if pool.capacity is None else pool.capacity - self._active(ci)
            warm_now[pool.name] = PoolNow(scheduled=warm)
            free[pool.name] = ClassCapacity(free=max(0, room), total=0)
        plan = place(desired=self.warm_target, order=order, now=warm_now, capacity=free)
        for ci, pool in enumerate(classes):
            change = plan.replicas[pool.name] - warm_now[pool.name].scheduled
            for _ in range(change):
                self._start_pod(ci, _WARM, now, instant=instant)
            if change < 0:
                ready = [p for p in self.pods if p.cls == ci and p.role == _WARM and p.ready]
                for pod in ready[:-change]:
                    self._terminate(pod, now)

    # ------------------------------------------------------------------ scaling

    def _pools(self, now: float) -> PoolState:
        out: list[ClassPool] = []
        for ci, pool in enumerate(self.cfg.classes):
            mine = [p for p in self.pods if p.cls == ci and p.role != _GONE]
            serving = sum(1 for p in mine if p.role == _SERVING and p.ready)
            warm = sum(1 for p in mine if p.role == _WARM and p.ready)
            starting = tuple(
                now - p.created
                for p in mine
                if (p.role == _SERVING and not p.ready) or p.role == _PROMOTING
            )
            free = None if pool.capacity is None else max(0, pool.capacity - len(mine))
            out.append(
                ClassPool(
                    name=pool.name,
                    speed=pool.speed,
                    serving_ready=serving,
                    warm_ready=warm,
                    starting=starting,
                    free_capacity=free,
                    cold_start=pool.cold_start,
                    warm_start=pool.warm_start,
                    cost_per_hour=pool.cost_per_hour,
                )
            )
        return PoolState(tuple(out))

    def _evaluate(self, now: float) -> None:
        self._account(now)
        view = ScalerView(
            now=now,
            pools=self._pools(now),
            store=self.store,
            history_span=self.cfg.history_span,
            queues=self.queues,
        )
        order = self.scaler.step(view)
        around = set(order.routed_around)
        self.shed = frozenset(p.id for p in self.lb if _pod_name(p) in around)
        if order.warm_pool is not None:
            self.warm_target = order.warm_pool
        if order.changes:
            self.scale_events += 1
            self.events.append((now, order.reason))
            self._apply(order, now)
        self._maintain_warm(now)

    def _apply(self, order: ScaleOrder, now: float) -> None:
        for action in order.actions:
            ci = self.cfg.class_index(action.name)
            warm = [p for p in self.pods if p.cls == ci and p.role == _WARM and p.ready]
            shortfall = max(0, action.promote_warm - len(warm))
            for pod in warm[: action.promote_warm]:
                self._promote(pod, now, instant=order.instant)
            for _ in range(action.start + shortfall):
                self._start_pod(ci, _SERVING, now, instant=order.instant)
            for pod in self._removal_order(ci)[: action.remove]:
                self._remove(pod, now)

    def _removal_order(self, cls: int) -> list[_Pod]:
        """Pods still starting go first (newest first), then the least loaded ready ones."""
        starting = [p for p in self.pods if p.cls == cls and p.role == _SERVING and not p.ready]
        starting.sort(key=lambda p: -p.created)
        promoting = [p for p in self.pods if p.cls == cls and p.role == _PROMOTING]
        ready = [p for p in self.lb if p.cls == cls]
        ready.sort(key=lambda p: (p.pending + p.busy, -p.created))
        return starting + promoting + ready

    # ------------------------------------------------------------------ observation

    def _scrape(self, now: float) -> None:
        pods = self.pods
        serving = [p for p in pods if p.role != _GONE]
        self._record_timeline(now, serving)
        if any(lo <= now < hi for lo, hi in self.cfg.scrape_outages):
            self.queues = ()
            return
        names = self.cfg.classes
        self.queues = tuple(PodQueue(_pod_name(p), names[p.cls].name, p.pending) for p in self.lb)
        horizon = now - self.cfg.summary_max_age
        p95 = math.nan
        for pod in serving:
            recent = pod.recent
            while recent and recent[0][0] < horizon:
                recent.popleft()
            if recent:
                values = sorted(v for _, v in recent)
                q = values[min(len(values) - 1, math.ceil(0.95 * len(values)) - 1)]
                p95 = q if math.isnan(p95) else max(p95, q)
        self.store.record(
            Scrape(
                at=now,
                success=float(sum(p.success for p in pods)),
                failure=float(sum(p.failure for p in pods)),
                items=float(sum(p.items for p in pods)),
                execs=float(sum(p.execs for p in pods)),
                request_time=sum(p.request_time for p in pods),
                queue_time=sum(p.queue_time for p in pods),
                compute_time=sum(p.compute_time for p in pods),
                pending=float(sum(p.pending for p in serving)),
                p95=p95,
            )
        )

    def _record_timeline(self, now: float, alive: Sequence[_Pod]) -> None:
        interval = self.cfg.scrape_interval
        arrived = self.arrived - self.last_timeline_arrivals
        self.last_timeline_arrivals = self.arrived
        self.timeline.append(
            TimelinePoint(
                at=now,
                serving_ready=len(self.lb),
                committed=sum(1 for p in alive if p.role in (_SERVING, _PROMOTING)),
                warm=sum(1 for p in alive if p.role in (_WARM, _DRAIN_TO_WARM)),
                pods=len(alive),
                demand=arrived / interval,
                routed_around=sum(1 for p in self.lb if p.id in self.shed),
            )
        )

    def _result(self, finish: float) -> SimResult:
        start = self.cfg.measure_from
        gpu_seconds = cost = 0.0
        for pod in self.pods:
            held = max(0.0, min(pod.gone, finish) - max(pod.created, start))
            gpu_seconds += held
            cost += held / 3600.0 * self.cfg.classes[pod.cls].cost_per_hour
        keep = [i for i, t in enumerate(self.arrival) if t >= start]
        return SimResult(
            policy=self.scaler.name,
            slo_latency=self.cfg.slo_latency,
            slo_quantile=self.cfg.slo_quantile,
            arrivals=tuple(self.arrival[i] - start for i in keep),
            latencies=tuple(self.latency[i] for i in keep),
            duration=max(0.0, finish - start),
            gpu_seconds=gpu_seconds,
            cost=cost,
            scale_events=sum(1 for t, _ in self.events if t >= start),
            timeline=tuple(replace(p, at=p.at - start) for p in self.timeline if p.at >= start),
            events=tuple((t - start, why) for t, why in self.events if t >= start),
        )


def simulate(*, config: SimConfig, workload: Workload, scaler: Scaler) -> SimResult:
    """Run ``workload`` through the simulated service under ``scaler``."""
    return Simulation(config=config, workload=workload, scaler=scaler).run()
