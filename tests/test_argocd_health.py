"""The Argo CD health check (charts/gpuserve/argocd/health.lua) on sample statuses.

The statuses are built with the operator's own status models and `set_condition`, so the
script is checked against the shape the operator really writes. It runs under a real Lua
interpreter (Debian's lua5.4; Argo CD embeds a Lua 5.1 dialect, and the script sticks to
what both accept).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuserve.api.conditions import set_condition
from gpuserve.api.status import AcceleratorClassStatus, Condition, InferenceServiceStatus

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "charts" / "gpuserve" / "argocd" / "health.lua"
ARGOCD_CM = REPO / "examples" / "gitops" / "argocd" / "argocd-cm-health.yaml"
NOW = "2026-01-01T00:00:00Z"
LUA_CANDIDATES = ("lua5.4", "lua5.3", "lua5.1", "lua")


def lua_binary() -> str | None:
    return next((found for name in LUA_CANDIDATES if (found := shutil.which(name))), None)


needs_lua = pytest.mark.skipif(
    lua_binary() is None,
    reason="no Lua interpreter on PATH (apt-get install -y lua5.4; scripts/bootstrap.sh "
    "should install it)",
)


def lua_literal(value: Any) -> str:
    """A Lua table constructor for a JSON-like value (as Argo CD hands objects to Lua)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"not representable: {value}")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid Lua escapes for these
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"[{json.dumps(k)}] = {lua_literal(v)}" for k, v in value.items()) + "}"
        )
    raise TypeError(type(value))


def run_health(obj: dict[str, Any], script: str | None = None) -> tuple[str, str]:
    """Runs the script as Argo CD does: global `obj`, the chunk returns {status, message}."""
    lua = lua_binary()
    assert lua is not None
    source = script if script is not None else SCRIPT.read_text()
    program = (
        f"obj = {lua_literal(obj)}\n"
        f"local check = assert(load({json.dumps(source)}))\n"
        "local hs = check()\n"
        'io.write(hs.status, "\\n", hs.message or "")\n'
    )
    result = subprocess.run(
        [lua, "-"], input=program, capture_output=True, text=True, timeout=10, check=False
    )
    assert result.returncode == 0, result.stderr
    status, _, message = result.stdout.partition("\n")
    return status, message


Conds = list[Condition]


def conds(*specs: tuple[str, str, str], generation: int) -> Conds:
    out: Conds = []
    for type_, status, reason in specs:
        out = set_condition(
            out,
            type_=type_,
            status=status,  # type: ignore[arg-type]
            reason=reason,
            message=f"{reason} says so",
            generation=generation,
            now=NOW,
        )
    return out


def service(generation: int, observed: int | None, conditions: Conds) -> dict[str, Any]:
    status = InferenceServiceStatus(observed_generation=observed, conditions=conditions)
    return {
        "apiVersion": "gpuserve.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "ml", "generation": generation},
        "spec": {},
        "status": status.model_dump(by_alias=True, exclude_none=True, mode="json"),
    }


def accelerator_class(generation: int, ready: str, reason: str) -> dict[str, Any]:
    status = AcceleratorClassStatus(
        observed_generation=generation,
        conditions=conds(("Ready", ready, reason), generation=generation),
    )
    return {
        "apiVersion": "gpuserve.io/v1alpha1",
        "kind": "AcceleratorClass",
        "metadata": {"name": "h100", "generation": generation},
        "spec": {},
        "status": status.model_dump(by_alias=True, exclude_none=True, mode="json"),
    }


SETTLED = (
    ("Ready", "True", "ServingPodsReady"),
    ("Reconciling", "False", "Settled"),
    ("Stalled", "False", "Progressing"),
)
SCALING = (
    ("Ready", "True", "ServingPodsReady"),
    ("Reconciling", "True", "ScalingPods"),
    ("Stalled", "False", "Progressing"),
)
STUCK = (
    ("Ready", "False", "AcceleratorClassNotFound"),
    ("Reconciling", "False", "Stalled"),
    ("Stalled", "True", "AcceleratorClassNotFound"),
)

CASES = [
    ("settled", service(3, 3, conds(*SETTLED, generation=3)), "Healthy", "ServingPodsReady"),
    ("scaling", service(3, 3, conds(*SCALING, generation=3)), "Progressing", "ScalingPods"),
    ("stalled", service(3, 3, conds(*STUCK, generation=3)), "Degraded", "AcceleratorClassNotFound"),
    (
        "ready-but-spec-not-observed",
        service(4, 3, conds(*SETTLED, generation=3)),
        "Progressing",
        "generation 4",
    ),
    # A Stalled condition about an older spec must not fail a sync of the new one.
    (
        "stalled-on-older-generation",
        service(5, 4, conds(*STUCK, generation=4)),
        "Progressing",
        "generation 5",
    ),
    (
        "no-status-yet",
        {"kind": "InferenceService", "metadata": {"generation": 1}},
        "Progressing",
        "Waiting for the gpuserve operator",
    ),
    (
        "ready-unknown",
        service(1, 1, conds(("Ready", "Unknown", "Starting"), generation=1)),
        "Progressing",
        "Starting",
    ),
    ("class-with-nodes", accelerator_class(2, "True", "NodesFound"), "Healthy", "NodesFound"),
    (
        "class-without-nodes",
        accelerator_class(2, "False", "NoMatchingNodes"),
        "Degraded",
        "NoMatchingNodes",
    ),
]


@needs_lua
@pytest.mark.parametrize(("case", "obj", "health", "hint"), CASES, ids=[c[0] for c in CASES])
def test_health_of_sample_statuses(case: str, obj: dict[str, Any], health: str, hint: str) -> None:
    status, message = run_health(obj)
    assert status == health, f"{case}: {status} ({message})"
    assert hint in message, f"{case}: {message!r}"


@needs_lua
def test_condition_without_reason_or_message_does_not_break_the_script() -> None:
    obj = {
        "metadata": {"generation": 1},
        "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert run_health(obj) == ("Healthy", "Ready")


@needs_lua
def test_script_fails_loudly_on_a_broken_chunk() -> None:
    # Guards the harness itself: a script error must fail the test, not read as a status.
    with pytest.raises(AssertionError):
        run_health({"metadata": {}}, script="return obj.status.conditions[1].type")


def test_argocd_config_example_embeds_the_chart_script_for_both_kinds() -> None:
    doc = yaml.safe_load(ARGOCD_CM.read_text())
    data = doc["data"]
    script = SCRIPT.read_text()
    for kind in ("InferenceService", "AcceleratorClass"):
        key = f"resource.customizations.health.gpuserve.io_{kind}"
        assert data.get(key) == script, f"{key} in {ARGOCD_CM.name} differs from {SCRIPT.name}"
