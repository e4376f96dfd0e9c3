"""Demo catalogue model "llm_emulator": an LLM engine on Triton's Python backend, decoupled.

The engine is gpuserve.llm.engine, the same model the simulator replays: a background
thread runs its loop, sleeping each step's cost (``EngineParams``: block size, number of
blocks, costs per token and per step; any field may be set as a string parameter of the
model config). Requests carry token counts instead of text, shaped after Triton's vLLM
backend:

- ``input_tokens`` (INT32 [1]): prompt length; ``output_tokens`` (INT32 [1]): tokens to
  generate (vLLM's ``max_tokens`` with the end-of-sequence token ignored);
- ``block_hashes`` (INT64 [-1], optional): content hashes of the prompt's leading blocks of
  ``block_size`` tokens, which the prefix cache keys on;
- ``stream`` (BOOL [1], optional, default false): one response per output token, the last
  one flagged final; otherwise one response with every token when the request ends.

``text_output`` (STRING) holds the synthetic tokens ("t0", "t1", ...). With the parameter
``REPORT_CUSTOM_METRICS: "true"``, as with Triton's vLLM backend, the engine's metrics are
exported under vLLM's names (gpuserve.llm.metrics) through the Python backend's metrics API.

gpuserve is imported from the interpreter whose stub runs this file: the harness starts
tritonserver with the project's virtualenv first on PATH, where ``make setup`` installed it.
"""

from __future__ import annotations

import itertools
import json
import queue
import threading
import time
import traceback
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from gpuserve.llm.engine import Engine, EngineStats, Request, StepPlan, StepResult
from gpuserve.llm.metrics import LABELS, EngineMetrics, MetricSpec, Sample
from gpuserve.llm.params import EngineParams, params_from_strings

METRICS_PARAMETER = "REPORT_CUSTOM_METRICS"
CANCEL_CHECK_S = 0.5  # how often clients' cancellations are looked up (an IPC per request)
_KINDS = {"counter": "COUNTER", "gauge": "GAUGE", "histogram": "HISTOGRAM"}


@dataclass
class _Client:
    sender: Any  # the request's pb_utils response sender
    stream: bool
    tokens: list[str]


class _Exporter:
    """The engine's metrics as Triton custom metrics, labelled like Triton's vLLM backend.
    Each metric update is a round trip to the server, so a thread of its own makes them,
    in order, off the engine loop (as the vLLM backend does)."""

    def __init__(self, rules: EngineMetrics, labels: dict[str, str]) -> None:
        self._metrics: dict[str, Any] = {}
        self._families: list[Any] = []  # kept alive as long as their metrics
        for spec in rules.specs:
            family = pb_utils.MetricFamily(
                name=spec.name,
                description=spec.description,
                kind=getattr(pb_utils.MetricFamily, _KINDS[spec.kind]),
            )
            self._families.append(family)
            if spec.kind == "histogram":
                metric = family.Metric(labels=labels, buckets=list(spec.buckets))
            else:
                metric = family.Metric(labels=labels)
            self._metrics[spec.name] = metric
        self._queue: queue.SimpleQueue[list[Sample] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="llm-metrics", daemon=True)
        self._thread.start()

    def record(self, samples: list[Sample]) -> None:
        if samples:
            self._queue.put(samples)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10.0)

    def _run(self) -> None:
        while (samples := self._queue.get()) is not None:
            for spec, value in samples:
                self._apply(spec, value)

    def _apply(self, spec: MetricSpec, value: float) -> None:
        metric = self._metrics[spec.name]
        if spec.kind == "histogram":
            metric.observe(value)
        elif spec.kind == "counter":
            metric.increment(value)
        else:
            metric.set(value)


def _scalar(request: Any, name: str) -> Any | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)


def _error(message: str) -> Any:
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))


def _text(tokens: list[str]) -> Any:
    return pb_utils.Tensor("text_output", np.array([" ".join(tokens).encode()], dtype=object))


class TritonPythonModel:
    """Queues requests into the engine; the engine thread streams the tokens back."""

    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                "llm_emulator streams tokens: set model_transaction_policy { decoupled: true }"
            )
        raw = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        engine_names = {f.name for f in fields(EngineParams)}
        self.params = params_from_strings({k: v for k, v in raw.items() if k in engine_names})
        self.engine = Engine(self.params)
        self.rules = EngineMetrics(self.params.max_model_len)
        self.exporter: _Exporter | None = None
        if raw.get(METRICS_PARAMETER, "").lower() == "true":
            labels = {LABELS[0]: args["model_name"], LABELS[1]: args["model_version"]}
            self.exporter = _Exporter(self.rules, labels)
        self.clients: dict[str, _Client] = {}
        self.ids = itertools.count()
        self.lock = threading.Condition()
        self.stopping = False
        self.counters = self.engine.stats()
        self.thread = threading.Thread(target=self._run, name="llm-engine", daemon=True)
        self.thread.start()

    # ---------------------------------------------------------------- requests
    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                prompt, output = _scalar(request, "input_tokens"), _scalar(request, "output_tokens")
                if prompt is None or output is None:
                    raise ValueError("input_tokens and output_tokens are required")
                hashes = _scalar(request, "block_hashes")
                stream = _scalar(request, "stream")
                with self.lock:
                    request_id = str(next(self.ids))
                    self.engine.add(
                        Request(
                            request_id,
                            int(prompt[0]),
                            int(output[0]),
                            time.monotonic(),
                            tuple(int(h) for h in hashes) if hashes is not None else (),
                        )
                    )
                    self.clients[request_id] = _Client(
                        sender, bool(stream[0]) if stream is not None else False, []
                    )
                    self._export_gauges()
                    self.lock.notify()
            except ValueError as err:  # the engine names the field
                sender.send(_error(str(err)), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    # ---------------------------------------------------------------- engine loop
    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # every client must hear that the engine died
            message = "llm_emulator engine failed: " + traceback.format_exc()
            pb_utils.Logger.log_error(message)
            self._fail_all(message)

    def _loop(self) -> None:
        """Each step: plan the batch, send the previous step's tokens while this one
        'computes', sleep until its cost has passed, collect its tokens."""
        unsent: tuple[StepPlan, StepResult] | None = None
        next_cancel_check = time.monotonic() + CANCEL_CHECK_S
        while True:
            with self.lock:
                while not self.stopping and self.engine.idle and unsent is None:
                    self.lock.wait()
                if self.stopping:
                    return
                started = time.monotonic()
                plan = self.engine.begin_step()
            if unsent is not None:
                self._deliver(*unsent)
                unsent = None
            if plan is None:
                continue
            time.sleep(max(0.0, started + plan.cost_s - time.monotonic()))
            with self.lock:
                unsent = (plan, self.engine.end_step(time.monotonic()))
            if time.monotonic() >= next_cancel_check:
                self._drop_cancelled()
                next_cancel_check = time.monotonic() + CANCEL_CHECK_S

    def _deliver(self, plan: StepPlan, result: StepResult) -> None:
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self.lock:
            stats = self.engine.stats()
            clients = {t.request_id: self.clients.get(t.request_id) for t in result.tokens}
            for token in result.tokens:
                if token.last:
                    self.clients.pop(token.request_id, None)
        for token in result.tokens:
            client = clients[token.request_id]
            if client is None:  # cancelled meanwhile
                continue
            text = f"t{token.index}"
            if client.stream:
                response = pb_utils.InferenceResponse(output_tensors=[_text([text])])
                client.sender.send(response, flags=final if token.last else 0)
            else:
                client.tokens.append(text)
                if token.last:
                    response = pb_utils.InferenceResponse(output_tensors=[_text(client.tokens)])
                    client.sender.send(response, flags=final)
        if self.exporter is not None:
            self.exporter.record(self.rules.step_samples(plan, result))
            self._export_counters(stats)
            self.exporter.record(self.rules.gauge_values(stats))

    def _export_counters(self, stats: EngineStats) -> None:
        if self.exporter is not None:
            self.exporter.record(self.rules.counter_increments(self.counters, stats))
        self.counters = stats

    def _export_gauges(self) -> None:
        if self.exporter is not None:
            self.exporter.record(self.rules.gauge_values(self.engine.stats()))

    def _drop_cancelled(self) -> None:
        with self.lock:
            cancelled = [rid for rid, c in self.clients.items() if c.sender.is_cancelled()]
            for request_id in cancelled:
                self.engine.abort(request_id)
                client = self.clients.pop(request_id)
                client.sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _fail_all(self, message: str) -> None:
        with self.lock:
            clients, self.clients = self.clients, {}
        for client in clients.values():
            client.sender.send(
                _error(message), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )

    def finalize(self) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify()
        self.thread.join(timeout=10.0)
        self._fail_all("llm_emulator is unloading")
        if self.exporter is not None:
            self.exporter.close()
