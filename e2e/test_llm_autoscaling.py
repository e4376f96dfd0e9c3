"""An LLM service scaled on its token objectives, on the local stack: the operator renders
the vLLM config, the runner serves it with the LLM engine emulator on a real tritonserver
(decoupled, streaming over gRPC, vLLM's metric names), Prometheus scrapes the pods, and
the autoscaler sizes the service with the LLM rule from those series.

The emulated engine is made slow (model parameters; each step sleeps its cost), so that
one replica's capacity is a rate this machine's client can exceed. The operator is not
told this: it prices the engine from the time per output token it measures.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.invalid_cases import valid_class, valid_llm_service
from e2e.loadgen import Limits, StreamReplay, Target, constant_rate_requests
from e2e.loadgen.results import percentile
from e2e.loadgen.streams import StreamRecord, StreamResult, trace_requests
from e2e.marks import LOCAL_DATA_PLANE
from e2e.runner.stack import Stack, apply, condition, events, local_stack, service_status
from e2e.test_warm_pool import settled
from e2e.triton.requests import LLMRequest
from gpuserve.api.models import (
    AcceleratorClassSpec,
    InferenceServiceSpec,
    parse_inference_service,
)
from gpuserve.api.status import KedaTokenMixStatus
from gpuserve.llm.deciding import sizing
from gpuserve.llm.from_spec import llm_policy_from_spec
from gpuserve.llm.gpus import engine_params_for_class
from gpuserve.llm.keda_mix import recorded_mix
from gpuserve.llm.params import EngineParams
from gpuserve.resources.keda import scaled_object
from gpuserve.sim.llm.traces import mooncake

pytestmark = LOCAL_DATA_PLANE

# The engine the operator prices an 8B model on the test's H100 class with
# (gpuserve.llm.gpus), 3.4 times slower in every cost: a slower GPU, which the operator
# is not told of and finds from the time per output token it measures. With 1,000-token
# prompts and 40 output tokens one replica keeps a 100 ms TPOT up to ~5.6 requests a
# second (the capacity model), so 12 a second need three.
SLOWDOWN = 3.4
PROMPT, OUTPUT = 1000, 40
# How long a stream may take, queue included.
STREAM_TIMEOUT_S = 120.0
SPEC_LLM = {"parameters": "8B", "maxContextLength": 2048, "prefixCaching": False}
COSTS = (
    "decode_base_s",
    "prefill_s_per_token",
    "prefill_s_per_token_pair",
    "decode_s_per_seq",
    "decode_s_per_context_token",
)


def slow_engine() -> dict[str, str]:
    body = valid_llm_service("x")
    body["spec"]["llm"] = SPEC_LLM
    spec = InferenceServiceSpec.model_validate(body["spec"])
    h100 = AcceleratorClassSpec.model_validate(valid_class()["spec"])
    engine = engine_params_for_class(spec, h100, EngineParams(max_model_len=2048))
    assert engine is not None, "the test's class must have a datasheet"
    return {name: repr(getattr(engine, name) * SLOWDOWN) for name in COSTS}


@pytest.fixture
def stack(cluster: ClusterHandle, namespace: str, tmp_path: Path) -> Iterator[Stack]:
    with local_stack(cluster, tmp_path, namespaces=frozenset({namespace})) as s:
        yield s


def llm_service(name: str) -> dict[str, Any]:
    """The smallest valid vLLM service, served by the slowed emulator, scaled 1-3."""
    body = valid_llm_service(name)
    spec = body["spec"]
    spec["model"].update(storageUri="demo://llm_emulator", name="llm", parameters=slow_engine())
    spec["slo"] = {"latency": "30s", "ttft": "1s", "tpot": "100ms", "percentile": 95}
    spec["llm"] = dict(SPEC_LLM)
    spec["scaling"] = {"minReplicas": 1, "maxReplicas": 3, "scaleDownStabilization": "30s"}
    return body


def stream_at_rate(
    stack: Stack, namespace: str, name: str, rate: int, seconds: int
) -> StreamReplay:
    """``rate`` streams a second for ``seconds``, spread over the serving pods of the
    moment; every response and error counted."""
    target = Target(
        model="llm",
        endpoints=stack.plane.runner.endpoints_for(namespace, name),
        # The first replica queues what it cannot serve until the new ones are ready; on
        # a loaded machine its oldest streams wait over a minute, and are still served.
        request_timeout_s=STREAM_TIMEOUT_S,
    )
    requests = constant_rate_requests(LLMRequest(PROMPT, OUTPUT), rate, seconds)
    return StreamReplay(requests, target, Limits(max_wall_s=seconds + STREAM_TIMEOUT_S)).start()


def failed_streams(result: StreamResult) -> str:
    """The failures by endpoint, with when they were sent: a hung pod and a long queue
    read differently."""
    by_endpoint: dict[str, list[StreamRecord]] = {}
    for record in result.records:
        if not record.ok:
            by_endpoint.setdefault(record.endpoint, []).append(record)
    return "; ".join(
        f"{endpoint or 'no endpoint'}: {len(failed)} sent {min(r.send_s for r in failed):.0f}-"
        f"{max(r.send_s for r in failed):.0f}s, first {failed[0].error}"
        for endpoint, failed in by_endpoint.items()
    )


def test_an_llm_service_scales_on_its_token_objectives_and_back(
    stack: Stack, cluster: ClusterHandle, namespace: str
) -> None:
    name = "chat"
    apply(cluster, namespace, llm_service(name))
    wait_for(lambda: settled(stack, namespace, name, 1, 0), 180, "one LLM replica serving")
    rate, seconds = 12, 90
    load = stream_at_rate(stack, namespace, name, rate=rate, seconds=seconds)

    def scaled_up() -> dict[str, Any] | None:
        status = service_status(cluster, namespace, name)
        last = status.get("lastDecision") or {}
        # Priced from a measurement: a first scale-up may come from the measured TTFT
        # alone, before a stream has finished and its time per token is known.
        priced = "timeScale" in (last.get("signals") or {})
        return last if priced and int(status.get("desiredReplicas", 1)) >= 2 else None

    def seen() -> str:
        return str(service_status(cluster, namespace, name).get("decisions"))

    decision = wait_for(scaled_up, 120, "the LLM rule to add replicas", explain=seen)
    # The token rule decided it (its reason and signals), pricing the engine from what
    # it measured: the emulator is 3.4 times slower than the H100 it was told of.
    assert "req/s per replica" in decision["reason"], decision
    # (Measured on a saturated replica the factor comes out above the true 3.4: the one
    # factor prices the fixed cost per step like the per-token work, docs/llm.md.)
    assert decision["signals"].get("timeScale", 0) > 1.5, decision
    # Sized on the stable window's mix (its minute, or 15 s while younger than a minute):
    # the service is younger than the ten minutes a mix is pooled over.
    assert 0 < decision["signals"].get("mixSeconds", 0) < 600, decision
    result = load.join(timeout_s=seconds + STREAM_TIMEOUT_S + 60)
    assert result.errors() == [], failed_streams(result)
    assert result.completed == rate * seconds
    # With the replicas added, time to first token is back under its objective: the p95
    # of the streams sent in the last 30 s of the load, well after the scale-up.
    late = [r.ttft_s for r in result.records if r.send_s >= seconds - 30 and r.ttft_s is not None]
    early = [r.ttft_s for r in result.records if r.send_s < 15 and r.ttft_s is not None]
    late_p95, early_p95 = percentile(late, 95), percentile(early, 95)
    assert late and late_p95 is not None and late_p95 <= 1.0, (early_p95, late_p95)
    # Demand gone: back to one replica once the scale-down window has passed.
    wait_for(
        lambda: int(service_status(cluster, namespace, name).get("desiredReplicas", 0)) == 1,
        150,
        "the LLM service back at one replica",
        explain=seen,
    )


MOONCAKE = Path(__file__).resolve().parent.parent / "traces" / "mooncake-conversation-2025.jsonl"


def test_a_mooncake_replay_shows_prefix_cache_hits_in_prometheus(
    stack: Stack, cluster: ClusterHandle, namespace: str
) -> None:
    """The first 40 requests of the Mooncake conversation trace, with their prompt-block
    hashes (a shared system prompt and earlier turns), streamed to an LLM service on the
    local cluster: Prometheus scrapes the prefix-cache hits vLLM's names carry."""
    name = "prefix"
    body = llm_service(name)
    spec = body["spec"]
    # Mooncake hashes 512-token blocks; its prompts reach 120k tokens; a quick prefill
    # (no attention cost, which would grow with the square of such prompts).
    spec["model"]["parameters"] = {
        "block_size": "512",
        "num_blocks": "1024",
        "max_model_len": "131072",
        "decode_base_s": "0.005",
        "prefill_s_per_token": "0.000005",
        "prefill_s_per_token_pair": "0",
    }
    spec["llm"] = {"parameters": "8B", "maxContextLength": 131072, "prefixCaching": True}
    spec["scaling"] = {"minReplicas": 1, "maxReplicas": 1}
    apply(cluster, namespace, body)
    wait_for(lambda: settled(stack, namespace, name, 1, 0), 180, "one LLM replica serving")
    with MOONCAKE.open() as lines:
        requests = trace_requests(mooncake(lines), max_output_tokens=4, count=40)
    target = Target(
        model="llm",
        endpoints=stack.plane.runner.endpoints_for(namespace, name),
        request_timeout_s=60.0,
    )
    limit = requests[-1].offset_s + 90
    result = StreamReplay(requests, target, Limits(max_wall_s=limit)).start().join()
    assert result.failures == 0, result.errors()[:3]
    prometheus = stack.plane.prometheus
    assert prometheus is not None
    where = f'{{namespace="{namespace}",service="{name}"}}'
    hits = prometheus.wait_for(f"sum(vllm:prefix_cache_hits_total{where}) > 0", timeout=30)
    queried = prometheus.query(f"sum(vllm:prefix_cache_queries_total{where})")
    hit_tokens, queried_tokens = float(hits[0]["value"][1]), float(queried[0]["value"][1])
    assert hit_tokens % 512 == 0 and 0 < hit_tokens < queried_tokens


def test_under_keda_the_rendered_triggers_read_the_llm_load_in_prometheus(
    stack: Stack, cluster: ClusterHandle, namespace: str
) -> None:
    """Under ``scaling.engine: keda`` an LLM service's ScaledObject reads its vLLM series.
    The two trigger queries the operator renders, run against the stack's Prometheus while
    one (slowed) replica is overloaded, read the arrivals the client sends (not the
    smaller rate the replica admits) and the queue it builds, and ask for more replicas.
    The operator records the token mix the replica served (status.kedaTokenMix) and the
    engine's measured time scale, which the thresholds are then rendered for, and drops
    them when the service goes back to the builtin engine. (This cluster serves no
    ScaledObject, so the service is Stalled; KEDA's side is the simulator's replay,
    tests/llm/test_keda_rendered.py.)"""
    name = "kchat"
    body = llm_service(name)
    body["spec"]["scaling"]["stableWindow"] = "20s"
    apply(cluster, namespace, body)
    wait_for(lambda: settled(stack, namespace, name, 1, 0), 180, "one LLM replica serving")
    body["spec"]["scaling"]["engine"] = "keda"
    apply(cluster, namespace, body)

    def stalled() -> bool:
        found = condition(service_status(cluster, namespace, name), "Stalled")
        return found is not None and found["status"] == "True"

    wait_for(stalled, 30, f"{name}: the KEDA rendering reported")
    body["metadata"]["namespace"] = namespace
    h100 = AcceleratorClassSpec.model_validate(valid_class()["spec"])
    prometheus = stack.plane.prometheus
    assert prometheus is not None
    rendered = scaled_object(
        parse_inference_service(body),
        "h100",
        h100,
        "http://unused",
        stack.plane.scrape_interval_s,
        classes={"h100": h100},
    )
    arrivals, waiting = (t["metadata"] for t in rendered["spec"]["triggers"])
    assert "[20s]" in arrivals["query"], arrivals
    # 12 streams a second for 45 s: one replica of the slowed engine admits fewer (the
    # first test needs three for its objectives), and drains the rest within the streams'
    # timeout after the load.
    rate, seconds = 12, 45
    load = stream_at_rate(stack, namespace, name, rate=rate, seconds=seconds)
    began = time.monotonic()
    admitted_query = arrivals["query"].split(" + ")[0].removeprefix("clamp_min(")

    def read(query: str) -> float:
        found = prometheus.query(query)
        return float(found[0]["value"][1]) if found else 0.0

    def reading() -> tuple[float, float, float]:
        return read(arrivals["query"]), read(admitted_query), read(waiting["query"])

    # The 20-s window wholly within the load, and a scrape or two after.
    time.sleep(max(0.0, 25 - (time.monotonic() - began)))

    def at_the_rate_sent() -> tuple[float, float, float] | None:
        now = reading()
        return now if 0.75 * rate <= now[0] <= 1.3 * rate else None

    def explain() -> str:
        arrived, admitted, queued = reading()
        return f"arrivals {arrived:.2f}/s, admitted {admitted:.2f}/s, waiting {queued:.0f}"

    seen = wait_for(
        at_the_rate_sent, seconds - 30, "the arrivals query to read the load sent", explain=explain
    )
    seen_arrivals, admitted, seen_waiting = seen
    # The replica admits less than arrives, and the queue's growth, which the sum adds,
    # brings the reading to the rate sent.
    assert seen_waiting > 0 and admitted < seen_arrivals, seen
    assert abs(seen_arrivals - rate) < abs(admitted - rate), seen
    proposals = (
        seen_arrivals / float(arrivals["threshold"]),
        seen_waiting / float(waiting["threshold"]),
    )
    assert max(proposals) > 1.0, (proposals, arrivals["threshold"], waiting["threshold"])

    # The operator measured the token mix the replica served (1,000-token prompts, 40
    # output tokens) and recorded it for the thresholds (status.kedaTokenMix).
    def recorded() -> dict[str, Any] | None:
        found: dict[str, Any] | None = service_status(cluster, namespace, name).get("kedaTokenMix")
        return found

    mix = wait_for(recorded, 60, f"{name}: status.kedaTokenMix")
    assert abs(mix["promptTokens"] - PROMPT) <= 1 and abs(mix["outputTokens"] - OUTPUT) <= 1
    assert mix["requestsPerReplica"] > 0 and "measured prompts of 1000 tokens" in mix["message"]
    said = [e for e in events(cluster, namespace, name) if e["reason"] == "KedaCalibrated"]
    assert said and "req/s per h100 replica" in said[-1]["message"], said

    # Its engine is priced by what it measured too, once streams have finished: the
    # emulator is slower than the H100 it was told of (the builtin engine's timeScale).
    def priced() -> dict[str, Any] | None:
        found = recorded()
        return found if found is not None and (found.get("timeScale") or 0) > 1.5 else None

    slow = wait_for(
        priced, 60, f"{name}: status.kedaTokenMix.timeScale", explain=lambda: str(recorded())
    )
    assert "modelled time costs" in slow["message"], slow
    record = recorded_mix(KedaTokenMixStatus.model_validate(slow))
    policy = llm_policy_from_spec(parse_inference_service(body).spec, classes={"h100": h100})
    assert record is not None and policy is not None
    as_modelled = sizing(policy, "h100", record.shape).per_replica
    assert slow["requestsPerReplica"] < 0.8 * as_modelled, (slow, as_modelled)
    result = load.join(timeout_s=seconds + STREAM_TIMEOUT_S + 60)
    assert result.errors() == [], failed_streams(result)
    assert result.completed == rate * seconds
    # Back under the builtin engine the record goes: nothing renders from it there.
    body["spec"]["scaling"]["engine"] = "builtin"
    apply(cluster, namespace, body)
    wait_for(lambda: recorded() is None, 30, f"{name}: status.kedaTokenMix removed")
