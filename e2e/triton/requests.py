"""Requests to the catalogue sleeper model, for tests and benchmarks that need traffic."""

from __future__ import annotations


def infer_sleeper(grpc_url: str, count: int = 1, timeout_s: float | None = None) -> None:
    """Sends ``count`` requests of one item (four floats) to ``sleeper``, one after another;
    raises the client's error if one fails."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        item = grpcclient.InferInput("INPUT", [1, 4], "FP32")
        item.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        for _ in range(count):
            client.infer("sleeper", [item], client_timeout=timeout_s)
    finally:
        client.close()
