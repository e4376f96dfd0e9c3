"""What an LLM service's status says about its InferencePool.

The pool is optional: without the Gateway API Inference Extension's CRDs the API server
has nowhere to store it, and the service serves through its Service as before. The
condition ``InferencePoolApplied`` says which of the two holds, and a Warning event marks
the moment the pool starts being skipped (once per transition, not once per reconcile).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuserve.api.conditions import set_condition
from gpuserve.api.models import InferenceService
from gpuserve.api.status import Condition
from gpuserve.resources import inference_pool

Event = tuple[str, str, str]  # type, reason, message

CONDITION = "InferencePoolApplied"
# Children a service works without: left out, and said so, when their kind is not served.
OPTIONAL_KINDS = frozenset({inference_pool.KIND})


def pool_condition_status(conditions: Sequence[Condition]) -> str | None:
    return next((c.status for c in conditions if c.type == CONDITION), None)


def set_pool_condition(
    conditions: list[Condition],
    svc: InferenceService,
    skipped: Sequence[dict[str, Any]],
    *,
    generation: int | None,
    now: str,
) -> list[Condition]:
    """The conditions with ``InferencePoolApplied`` set for an LLM service and removed for
    any other (a service that stopped being one has no pool to speak of)."""
    spec = inference_pool.inference_pool_spec(svc)
    if spec is None:
        return [c for c in conditions if c.type != CONDITION]
    name = svc.metadata.name
    if any(c["kind"] == inference_pool.KIND for c in skipped):
        return set_condition(
            conditions,
            type_=CONDITION,
            status="False",
            reason="CRDNotInstalled",
            message=(
                f"the API server does not serve {inference_pool.KIND} "
                f"({inference_pool.API_VERSION}): no pool for a gateway to route by prefix; "
                "requests reach the serving pods through the Service only. Install the "
                "Gateway API Inference Extension's CRDs (docs/routing.md)"
            ),
            generation=generation,
            now=now,
        )
    picker = spec["endpointPickerRef"]
    return set_condition(
        conditions,
        type_=CONDITION,
        status="True",
        reason="Applied",
        message=(
            f"{inference_pool.KIND} {name} selects the serving pods on port "
            f"{spec['targetPorts'][0]['number']}; its endpoint picker is the Service "
            f"{picker['name']}:{picker['port']['number']} (docs/routing.md)"
        ),
        generation=generation,
        now=now,
    )


def pool_event(was: str | None, conditions: Sequence[Condition]) -> Event | None:
    """A Warning when the pool starts being skipped; nothing while that stays so."""
    now = next((c for c in conditions if c.type == CONDITION), None)
    if now is None or now.status != "False" or was == "False":
        return None
    return ("Warning", "InferencePoolSkipped", now.message)
