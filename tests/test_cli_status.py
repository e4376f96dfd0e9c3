"""`gpuserve status`: conditions shown, the decision whole, lines fitted to the terminal."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.status import render
from e2e.invalid_cases import valid_service

DECISION = (
    "needs 3 replicas (queue 41 per pod over target 12 at p95 43ms against 40ms); "
    "2 pods could not be placed (no free capacity in any class)"
)


def _service() -> dict[str, Any]:
    obj = valid_service("chat")
    obj["metadata"]["namespace"] = "ml"
    obj["status"] = {
        "replicas": 1,
        "desiredReplicas": 3,
        "p95Ms": 43.4,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Serving", "message": "1 of 3 ready"},
            {
                "type": "Schedulable",
                "status": "False",
                "reason": "CapacityShort",
                "message": "2 pods could not be placed in h100, l4",
            },
        ],
        "lastDecision": {
            "time": "2025-01-01T00:00:00Z",
            "desiredReplicas": 3,
            "reason": DECISION,
        },
    }
    return obj


def _words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("width", [60, 100, 240])
def test_conditions_and_the_whole_decision_fit_the_width(width: int) -> None:
    out = render([_service()], width)
    assert "Ready=True Serving: 1 of 3 ready" in " ".join(out.split())
    assert "Schedulable=False CapacityShort: 2 pods could not be placed in h100, l4" in " ".join(
        out.split()
    )
    # Every word of the decision, in order, none cut.
    words = _words(out)
    start = words.index("needs")
    assert words[start : start + len(_words(DECISION))] == _words(DECISION)
    detail_lines = out.split("\n\n", 1)[1].splitlines()
    assert all(len(line) <= width for line in detail_lines), detail_lines


def test_the_summary_table_has_the_p95_against_the_slo() -> None:
    table = render([_service()], 120).split("\n\n")[0].splitlines()
    assert table[0].split()[:3] == ["NAMESPACE", "NAME", "READY"]
    assert "43ms/50ms" in table[1] and "1/3" in table[1]


def test_a_service_without_status_says_so() -> None:
    obj = valid_service("fresh")
    obj["metadata"]["namespace"] = "ml"
    assert "(no status yet)" in render([obj], 80)


def test_a_routed_around_pod_is_listed_with_its_queue() -> None:
    obj = _service()
    obj["status"]["routedAround"] = [{"pod": "chat-h100-abc", "queued": 412.0, "clears": 7.9}]
    text = " ".join(render([obj], 100).split())
    assert "routed around: pod chat-h100-abc until it clears its queue" in text
    assert "(412 waiting, 7.9 clear within the queue budget)" in text
    assert "routed around" not in render([_service()], 100)


def test_a_keda_services_measured_threshold_is_listed() -> None:
    obj = _service()
    obj["status"]["kedaCalibration"] = {
        "time": "2026-12-02T20:00:00Z",
        "computeMs": 15.1,
        "meanBatch": 1.0,
        "relativeSpeed": 1.0,
        "serviceScale": 3.02,
        "message": "Triton measured 15.1 ms of compute per request",
    }
    text = " ".join(render([obj], 100).split())
    assert "KEDA threshold, measured at 2026-12-02T20:00:00Z: Triton measured 15.1 ms" in text
    assert "KEDA threshold" not in render([_service()], 100)


def test_an_llm_keda_services_measured_token_mix_is_listed() -> None:
    obj = _service()
    obj["status"]["kedaTokenMix"] = {
        "time": "2026-12-07T07:00:00Z",
        "promptTokens": 3199.0,
        "promptTokensHigh": 5000.0,
        "outputTokens": 318.0,
        "requestsPerReplica": 5.95,
        "message": "measured prompts of 3199 tokens on average",
    }
    text = " ".join(render([obj], 100).split())
    assert "token mix measured at 2026-12-07T07:00:00Z: measured prompts of 3199" in text
    assert "token mix" not in render([_service()], 100)


def test_an_api_server_out_of_reach_is_one_line_naming_it(tmp_path: Path) -> None:
    """A refused connection reaches the client as urllib3's MaxRetryError, which is no
    OSError: it printed a traceback."""
    with socket.socket() as s:  # a loopback port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = f"https://127.0.0.1:{port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "status"],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot reach the API server at {server}" in lines[0], lines
