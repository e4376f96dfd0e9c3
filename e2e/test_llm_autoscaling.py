"""An LLM service scaled on its token objectives, on the local stack: the operator renders
the vLLM config, the runner serves it with the LLM engine emulator on a real tritonserver
(decoupled, streaming over gRPC, vLLM's metric names), Prometheus scrapes the pods, and
the autoscaler sizes the service with the LLM rule from those series.

The emulated engine is made slow (model parameters; each step sleeps its cost), so that
one replica's capacity is a rate this machine's client can exceed. The operator is not
told this: it prices the engine from the time per output token it measures.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.invalid_cases import valid_llm_service
from e2e.loadgen import Limits, StreamReplay, Target, constant_rate_requests
from e2e.marks import LOCAL_DATA_PLANE
from e2e.runner.stack import Stack, apply, local_stack, service_status
from e2e.test_warm_pool import settled
from e2e.triton.requests import LLMRequest

pytestmark = LOCAL_DATA_PLANE

# 20 ms per step, 0.2 ms per uncached prompt token, 1 ms per decoding sequence: with
# 200-token prompts and 40 output tokens one replica keeps a 60 ms TPOT up to a few
# requests per second.
SLOW_ENGINE = {
    "decode_base_s": "0.02",
    "prefill_s_per_token": "0.0002",
    "decode_s_per_seq": "0.001",
}
PROMPT, OUTPUT = 200, 40


@pytest.fixture
def stack(cluster: ClusterHandle, namespace: str, tmp_path: Path) -> Iterator[Stack]:
    with local_stack(cluster, tmp_path, namespaces=frozenset({namespace})) as s:
        yield s


def llm_service(name: str) -> dict[str, Any]:
    """The smallest valid vLLM service, served by the slowed emulator, scaled 1-3."""
    body = valid_llm_service(name)
    spec = body["spec"]
    spec["model"].update(storageUri="demo://llm_emulator", name="llm", parameters=SLOW_ENGINE)
    spec["slo"] = {"latency": "30s", "ttft": "1s", "tpot": "60ms", "percentile": 95}
    spec["llm"] = {"parameters": "8B", "maxContextLength": 2048, "prefixCaching": False}
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
        request_timeout_s=60.0,
    )
    requests = constant_rate_requests(LLMRequest(PROMPT, OUTPUT), rate, seconds)
    return StreamReplay(requests, target, Limits(max_wall_s=seconds + 60)).start()


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
        return last if int(status.get("desiredReplicas", 1)) >= 2 else None

    def seen() -> str:
        return str(service_status(cluster, namespace, name).get("decisions"))

    decision = wait_for(scaled_up, 120, "the LLM rule to add replicas", explain=seen)
    # The token rule decided it (its reason and signals), pricing the engine from what
    # it measured: the emulator is far slower than the H100 defaults.
    assert "req/s per replica" in decision["reason"], decision
    assert decision["signals"].get("timeScale", 0) > 1.5, decision
    result = load.join(timeout_s=seconds + 120)
    assert result.errors() == [], result.errors()[:5]
    assert result.completed == rate * seconds
    # Demand gone: back to one replica once the scale-down window has passed.
    wait_for(
        lambda: int(service_status(cluster, namespace, name).get("desiredReplicas", 0)) == 1,
        150,
        "the LLM service back at one replica",
        explain=seen,
    )
