"""gRPC connections and request payloads for the load generator (tritonclient.grpc.aio)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc.aio import InferenceServerClient, InferInput
from tritonclient.utils import triton_to_np_dtype

from e2e.loadgen.endpoints import check_loopback

# gRPC shares TCP connections between channels to the same target unless told otherwise; a
# local subchannel pool gives each client object its own connection, like separate clients.
_INDEPENDENT = [("grpc.use_local_subchannel_pool", 1)]


@dataclass(frozen=True)
class TensorShape:
    name: str
    datatype: str  # KServe v2 datatype, e.g. FP32
    shape: tuple[int, ...]  # full request shape, batch dimension included when batching


class Payload:
    """The inputs sent with every request: one item (batch 1) of each model input, zeros.

    Built from the model's metadata and config, so any model works; arrays are created once.
    """

    def __init__(self, tensors: list[TensorShape]) -> None:
        self.tensors = tensors
        self._arrays = [self._array(t) for t in tensors]

    @staticmethod
    def _array(tensor: TensorShape) -> Any:
        if tensor.datatype == "BYTES":
            return np.full(tensor.shape, b"x", dtype=object)
        return np.zeros(tensor.shape, dtype=triton_to_np_dtype(tensor.datatype))

    def inputs(self) -> list[InferInput]:
        # InferInput objects are cheap wrappers; a fresh list per request keeps requests
        # independent while the numpy data is shared.
        made = []
        for tensor, array in zip(self.tensors, self._arrays, strict=True):
            item = InferInput(tensor.name, list(tensor.shape), tensor.datatype)
            item.set_data_from_numpy(array)
            made.append(item)
        return made

    @classmethod
    async def for_model(
        cls, client: InferenceServerClient, model: str, version: str = "", timeout: float = 10
    ) -> Payload:
        """Reads the model's inputs and max_batch_size from a server."""
        metadata = await client.get_model_metadata(
            model, version, as_json=True, client_timeout=timeout
        )
        config = await client.get_model_config(model, version, as_json=True, client_timeout=timeout)
        batching = int(config.get("config", {}).get("max_batch_size", 0)) > 0
        tensors = []
        for spec in metadata.get("inputs", []):
            dims = [int(d) for d in spec.get("shape", [])]
            if batching and dims:
                dims = dims[1:]  # metadata includes the -1 batch dimension
            shape = ([1] if batching else []) + [d if d > 0 else 1 for d in dims]
            tensors.append(TensorShape(spec["name"], spec["datatype"], tuple(shape)))
        return cls(tensors)


class ConnectionPool:
    """``per_endpoint`` independent gRPC clients per endpoint, created on first use."""

    def __init__(self, per_endpoint: int = 1) -> None:
        if per_endpoint < 1:
            raise ValueError("per_endpoint must be >= 1")
        self.per_endpoint = per_endpoint
        self._clients: dict[tuple[str, int], InferenceServerClient] = {}

    def get(self, endpoint: str, slot: int = 0) -> InferenceServerClient:
        """The client for ``endpoint`` in connection slot ``slot % per_endpoint``."""
        key = (check_loopback(endpoint), slot % self.per_endpoint)
        client = self._clients.get(key)
        if client is None:
            client = InferenceServerClient(key[0], channel_args=_INDEPENDENT)
            self._clients[key] = client
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                await client.close()
        self._clients.clear()
