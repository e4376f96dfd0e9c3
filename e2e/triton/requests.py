"""Requests to the catalogue models (sleeper, llm_emulator), for tests and benchmarks that
need traffic."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


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


@dataclass(frozen=True)
class LLMRequest:
    """A request to the catalogue's llm_emulator model (or a config with its inputs)."""

    prompt_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...] = ()
    stream: bool = True


@dataclass
class LLMResponses:
    """What came back for one request, with client-side times (time.monotonic)."""

    sent_s: float
    texts: list[str] = field(default_factory=list)  # text_output of each response
    times_s: list[float] = field(default_factory=list)
    finals: list[bool] = field(default_factory=list)  # Triton's final flag per response

    @property
    def done(self) -> bool:
        return bool(self.finals) and self.finals[-1]

    @property
    def ttft_s(self) -> float:
        return self.times_s[0] - self.sent_s


@dataclass
class LLMRun:
    responses: list[LLMResponses]
    errors: list[str]  # error responses (the stream does not say which request they end)


def _llm_inputs(request: LLMRequest) -> list[Any]:
    import numpy as np
    import tritonclient.grpc as grpcclient

    arrays = [
        ("input_tokens", np.array([request.prompt_tokens], dtype=np.int32), "INT32"),
        ("output_tokens", np.array([request.output_tokens], dtype=np.int32), "INT32"),
        ("stream", np.array([request.stream], dtype=bool), "BOOL"),
    ]
    if request.block_hashes:
        arrays.append(("block_hashes", np.array(request.block_hashes, dtype=np.int64), "INT64"))
    inputs = []
    for name, array, dtype in arrays:
        item = grpcclient.InferInput(name, list(array.shape), dtype)
        item.set_data_from_numpy(array)
        inputs.append(item)
    return inputs


def stream_llm(
    grpc_url: str, model: str, requests: list[LLMRequest], *, timeout_s: float = 30.0
) -> LLMRun:
    """Sends ``requests`` at once on one gRPC stream and collects every response until each
    has its final one (or an error came for it); raises TimeoutError after ``timeout_s``."""
    import tritonclient.grpc as grpcclient

    run = LLMRun([LLMResponses(0.0) for _ in requests], [])
    lock = threading.Lock()
    all_done = threading.Event()

    def finished() -> bool:
        return sum(r.done for r in run.responses) + len(run.errors) >= len(requests)

    def on_response(result: Any, error: Any) -> None:
        now = time.monotonic()
        with lock:
            if error is not None:
                run.errors.append(str(error))
            else:
                response = result.get_response()
                texts = result.as_numpy("text_output")
                got = run.responses[int(response.id)]
                got.times_s.append(now)
                got.texts.append(b" ".join(texts).decode() if texts is not None else "")
                got.finals.append(response.parameters["triton_final_response"].bool_param)
            if finished():
                all_done.set()

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        client.start_stream(callback=on_response)
        for index, request in enumerate(requests):
            with lock:
                run.responses[index].sent_s = time.monotonic()
            client.async_stream_infer(
                model,
                _llm_inputs(request),
                request_id=str(index),
                enable_empty_final_response=True,
            )
        if not all_done.wait(timeout_s):
            raise TimeoutError(f"{model}: not every request ended within {timeout_s:.0f} s")
    finally:
        # Cancelling requests that have all ended would only report a cancelled stream.
        client.stop_stream(cancel_requests=not all_done.is_set())
        client.close()
    return run
