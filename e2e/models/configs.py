"""Builds config.pbtxt text for the sleeper demo model (tests, benchmarks, examples)."""

from __future__ import annotations

from collections.abc import Sequence


def sleeper_config(
    name: str = "sleeper",
    *,
    max_batch_size: int = 32,
    dynamic_batching: bool = True,
    preferred_batch_sizes: Sequence[int] = (),
    max_queue_delay_us: int = 0,
    instance_count: int = 1,
    exec_time_ms: float = 5.0,
    per_item_ms: float = 0.2,
    load_time_ms: float = 0.0,
    batcher_extra: str = "",
    extra: str = "",
) -> str:
    """Returns a python-backend config for the sleeper model (INPUT/OUTPUT FP32 [4]).

    ``batcher_extra`` is pasted inside ``dynamic_batching { }`` (e.g. ``priority_levels: 2``);
    ``extra`` is appended at top level.
    """
    lines = [
        f'name: "{name}"',
        'backend: "python"',
        f"max_batch_size: {max_batch_size}",
        'input [ { name: "INPUT", data_type: TYPE_FP32, dims: [ 4 ] } ]',
        'output [ { name: "OUTPUT", data_type: TYPE_FP32, dims: [ 4 ] } ]',
        f"instance_group [ {{ kind: KIND_CPU, count: {instance_count} }} ]",
    ]
    if dynamic_batching:
        body = []
        if preferred_batch_sizes:
            body.append(f"preferred_batch_size: [ {', '.join(map(str, preferred_batch_sizes))} ]")
        body.append(f"max_queue_delay_microseconds: {max_queue_delay_us}")
        if batcher_extra:
            body.append(batcher_extra)
        lines.append("dynamic_batching {\n  " + "\n  ".join(body) + "\n}")
    for key, value in (
        ("exec_time_ms", exec_time_ms),
        ("per_item_ms", per_item_ms),
        ("load_time_ms", load_time_ms),
    ):
        lines.append(f'parameters {{ key: "{key}" value: {{ string_value: "{value:g}" }} }}')
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"
