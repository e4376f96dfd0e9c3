"""Demo catalogue model "sleeper": a Triton Python-backend model that costs time like a GPU.

Each execution of a batch of n items sleeps ``exec_time_ms + n * per_item_ms`` (model config
``parameters``; defaults 5 and 0.2), so batching pays off the way it does on a real accelerator.
Optional ``load_time_ms`` (default 0) delays ``initialize`` to imitate a slow model load, and
``slowdown`` (default 1) multiplies every execution's sleep: a model slower than the times its
parameters state, as one profiled on other hardware is (the operator reads those times).

Outputs are paired with inputs by position: output i is a copy of input i when dtype and shape
agree (the catalogue signature ``INPUT`` FP32 [4] -> ``OUTPUT`` FP32 [4] is such a copy);
otherwise it is zeros of the output's configured shape. That lets the same file stand in for any
model signature when a rendered config is checked against real Triton.
Works with max_batch_size 0 or > 0, with or without dynamic batching.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

DEFAULT_EXEC_TIME_MS = 5.0
DEFAULT_PER_ITEM_MS = 0.2


def _param(config: dict[str, Any], key: str, default: float) -> float:
    """Reads a numeric model-config parameter (Triton stores them as strings)."""
    raw = config.get("parameters", {}).get(key, {}).get("string_value")
    if raw is None or raw == "":
        return default
    return float(raw)


def _numpy_dtype(triton_type: str) -> Any:
    # TYPE_STRING maps to object; everything else to a fixed-size numpy type.
    return pb_utils.triton_string_to_numpy(triton_type)


class TritonPythonModel:
    """Sleeps in proportion to the batch size, then echoes inputs to outputs."""

    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.max_batch_size = int(config.get("max_batch_size", 0))
        self.exec_s = _param(config, "exec_time_ms", DEFAULT_EXEC_TIME_MS) / 1000.0
        self.per_item_s = _param(config, "per_item_ms", DEFAULT_PER_ITEM_MS) / 1000.0
        slowdown = _param(config, "slowdown", 1.0)
        self.exec_s *= slowdown
        self.per_item_s *= slowdown
        self.inputs = [(i["name"], i["data_type"]) for i in config.get("input", [])]
        self.outputs = [
            (o["name"], _numpy_dtype(o["data_type"]), [int(d) for d in o.get("dims", [])])
            for o in config.get("output", [])
        ]
        load_s = _param(config, "load_time_ms", 0.0) / 1000.0
        if load_s > 0:
            time.sleep(load_s)

    def _items(self, request: Any) -> int:
        """Batch items carried by one request: its leading dimension when batching is on."""
        if self.max_batch_size <= 0 or not self.inputs:
            return 1
        tensor = pb_utils.get_input_tensor_by_name(request, self.inputs[0][0])
        shape = tensor.as_numpy().shape if tensor is not None else ()
        return int(shape[0]) if shape else 1

    def _output(self, index: int, request: Any, items: int) -> Any:
        name, dtype, dims = self.outputs[index]
        leading = [items] if self.max_batch_size > 0 else []
        if index < len(self.inputs):
            tensor = pb_utils.get_input_tensor_by_name(request, self.inputs[index][0])
            if tensor is not None:
                data = tensor.as_numpy()
                tail = data.shape[len(leading) :]
                same_shape = len(tail) == len(dims) and all(
                    d == -1 or d == t for d, t in zip(dims, tail, strict=True)
                )
                if same_shape and data.dtype == np.dtype(dtype):
                    return pb_utils.Tensor(name, data.copy())
        shape = leading + [d if d >= 0 else 1 for d in dims]
        if np.dtype(dtype) == np.dtype(object):
            return pb_utils.Tensor(name, np.full(shape, b"", dtype=object))
        return pb_utils.Tensor(name, np.zeros(shape, dtype=dtype))

    def execute(self, requests: list[Any]) -> list[Any]:
        counts = [self._items(r) for r in requests]
        # One sleep per execution: a fixed launch cost plus a per-item cost, like a GPU kernel.
        time.sleep(self.exec_s + sum(counts) * self.per_item_s)
        return [
            pb_utils.InferenceResponse(
                output_tensors=[self._output(i, r, n) for i in range(len(self.outputs))]
            )
            for r, n in zip(requests, counts, strict=True)
        ]

    def finalize(self) -> None:
        """Nothing to release."""
