"""Reading Triton's Prometheus exposition (the metrics port's text) in tests."""

from __future__ import annotations

import re

# name{label="value",...} number  (Triton writes no timestamps)
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample named exactly ``name`` (e.g. a histogram's
    ``..._count`` or ``..._bucket``)."""
    found: list[tuple[dict[str, str], float]] = []
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None or match.group(1) != name:
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        found.append((labels, float(match.group(3))))
    return found


def model_value(text: str, name: str, model: str, **labels: str) -> float:
    """Sum of ``name``'s samples for ``model`` (and any further labels); KeyError when the
    exposition has none, so a missing metric is not read as zero."""
    wanted = {"model": model, **labels}
    values = [
        value
        for sample_labels, value in samples(text, name)
        if all(sample_labels.get(k) == v for k, v in wanted.items())
    ]
    if not values:
        raise KeyError(f"{name} for {wanted} not in the metrics")
    return sum(values)
