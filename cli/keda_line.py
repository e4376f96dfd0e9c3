"""The line `gpuserve simulate` prints for a replayed ScaledObject: what it asks of KEDA."""

from __future__ import annotations

from gpuserve.autoscaling.query_windows import DEFAULT_SCRAPE_INTERVAL_S
from gpuserve.resources.keda import HPA_PERIOD_S, KedaScaling


def keda_line(k: KedaScaling, *, min_replicas: int, llm: bool) -> str:
    """``llm``: the thresholds come from the LLM rule (arrivals and waiting requests), not
    from the spec's service times (completed requests and Triton's queue)."""
    if llm:
        source = "the LLM rule's capacity model"
        rate = f"{k.rate_threshold} arrivals/s per replica"
        queue = f", {k.queue_threshold:g} waiting per replica" if k.queue_threshold else ""
    else:
        source = "the spec's service times"
        rate = f"{k.rate_threshold} req/s per replica"
        queue = f", queue {k.queue_threshold:g} per replica" if k.queue_threshold else ""
    # KEDA activates a ScaledObject from zero on its own; the replay keeps one pod.
    zero = "; minReplicas 0: scale-to-zero not replayed (1 at least)" if not min_replicas else ""
    return (
        f"KEDA as rendered from {source} (at a {DEFAULT_SCRAPE_INTERVAL_S:g}-s scrape): "
        f"{rate} over {k.rate_window_s:g}s{queue}; scale-down window {k.down_window_s}s, "
        f"per {HPA_PERIOD_S}s up by max({k.up_percent}%, {k.up_pods} pods), down by "
        f"{k.down_percent}%{zero}"
    )
