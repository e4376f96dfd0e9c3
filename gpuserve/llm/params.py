"""The engine's size and speed: one frozen set of parameters with documented defaults.

The defaults stand for Llama 3 8B in bf16 on one H100 SXM (80 GB) under vLLM, as measured:
they are what ``gpuserve/llm/gpus.py`` derives for that model on that GPU (the H100's
datasheet at the efficiencies a real H100 showed; docs/bench-notes/gpu-engine-timing.md),
rounded to three figures. ``tests/llm/test_gpus.py`` holds the two together.

- A decode step costs 7.86 ms whatever it computes (``decode_base_s``): 1.79 ms of kernel
  launches and small kernels, plus 1.27 reads of the 16 GB of weights at 3.35 TB/s.
- A prompt token costs 2 x 8e9 FLOP at 70% of the GPU's 989 dense bf16 TFLOP/s, 23.1 us
  (``prefill_s_per_token``); a decoding sequence adds 44% of that FLOP time at the full
  rate, 7.12 us (``decode_s_per_seq``, which also covers sampling).
- A prompt token attends to itself and every token before it in its sequence, cached or
  computed in an earlier chunk: 4 FLOPs x 32 layers x 32 query heads x 128 per pair at 33%
  of that rate, 1.61 ns (``prefill_s_per_token_pair``). A 2,048-token chunk after 30,720
  cached tokens spends twice as long on that attention as on its tokens.
- Attention reads each cached token's keys and values, 128 KiB per token (32 layers x 8 KV
  heads x 128 x 2 x 2 bytes), at 1.07 times their read time: 41.9 ns
  (``decode_s_per_context_token``).
- 90% of 80 GiB, less the weights and 3 GB of activations, leaves ~54 GiB of KV cache:
  27,804 blocks of 16 tokens, ~445k tokens (``num_blocks``; vLLM's memory rule as placement
  checks it, not measured).
- ``block_size`` 16, ``max_running`` 256 and ``max_batched_tokens`` 8192 are vLLM's
  defaults (``block_size``, ``max_num_seqs``, ``max_num_batched_tokens``); ``max_model_len``
  8192 is Llama 3's context.

Until 2026-11-24 the defaults were a datasheet guess (5 ms a step, 27 us a prompt token,
30 us a decoding sequence, 40 ns a context token, 27,000 blocks); the LLM capacity tables in
docs/bench-notes/llm-capacity.md dated before then ran on it. Until 2026-11-26 a prompt's
attention was not priced apart (28.9 us a prompt token, nothing per pair): that priced
Azure-sized prompts 14% high and the Mooncake traces' long ones 45% low in all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class EngineParams:
    """What bounds and what costs one engine (one model replica)."""

    block_size: int = 16  # tokens per KV-cache block
    num_blocks: int = 27_804  # KV-cache blocks on the replica
    max_running: int = 256  # sequences batched at once
    max_batched_tokens: int = 8192  # tokens computed per step (longer prompts are chunked)
    max_model_len: int = 8192  # prompt + output tokens of one request
    prefix_caching: bool = True
    prefill_s_per_token: float = 23.1e-6  # per uncached prompt token computed
    # per pair of a computed prompt token and a token before it in its sequence (cached or
    # computed): attention, whose work grows with the square of a prompt's length
    prefill_s_per_token_pair: float = 1.61e-9
    decode_base_s: float = 7.86e-3  # per step: launches and reading the weights
    decode_s_per_seq: float = 7.12e-6  # per sequence decoding a token this step
    decode_s_per_context_token: float = 41.9e-9  # per token in the decoding sequences' contexts

    def __post_init__(self) -> None:
        for name in ("block_size", "num_blocks", "max_running", "max_batched_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")
        if not 2 <= self.max_model_len <= self.capacity_tokens:
            # vLLM refuses to start when one full-length sequence cannot fit the cache.
            raise ValueError(
                f"max_model_len: must be between 2 and the cache's {self.capacity_tokens} "
                f"tokens (num_blocks x block_size), got {self.max_model_len}"
            )
        for name in (
            "prefill_s_per_token",
            "prefill_s_per_token_pair",
            "decode_base_s",
            "decode_s_per_seq",
            "decode_s_per_context_token",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must not be negative, got {getattr(self, name)}")

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def step_cost_s(
        self,
        prefill_tokens: float,
        decode_seqs: float,
        context_tokens: float,
        prefill_pairs: float = 0.0,
    ) -> float:
        """Seconds one engine step takes: the engine's cost rule, also used (with mean
        figures) by the capacity model. ``prefill_pairs`` counts, over the prompt tokens
        computed, the tokens each attends to (``prompt_pairs``)."""
        fixed = self.step_cost_before_context_s(prefill_tokens, decode_seqs, prefill_pairs)
        return fixed + self.decode_s_per_context_token * context_tokens

    def step_cost_before_context_s(
        self, prefill_tokens: float, decode_seqs: float, prefill_pairs: float = 0.0
    ) -> float:
        """``step_cost_s`` before its context term is added: what the steps of a decode
        stretch share (each then adds its own context), summed in the same order."""
        return (
            self.decode_base_s
            + self.prefill_s_per_token * prefill_tokens
            + self.prefill_s_per_token_pair * prefill_pairs
            + self.decode_s_per_seq * decode_seqs
        )

    def prefill_step_s(self, tokens: float, before: float = 0.0) -> float:
        """Seconds of a step that computes only ``tokens`` prompt tokens after ``before``
        tokens of the same sequence (a chunk of a prompt, alone in its step)."""
        return self.step_cost_s(tokens, 0, 0, prompt_pairs(tokens, before))

    def slower(self, factor: float, *, prefill: float = 1.0) -> EngineParams:
        """The same engine with every time cost multiplied by ``factor`` (a slower GPU, or
        a model this engine's defaults do not describe), and the prompt's costs by
        ``prefill`` beyond it; its sizes are unchanged."""
        if not factor > 0:
            raise ValueError(f"factor: must be positive, got {factor}")
        if not prefill > 0:
            raise ValueError(f"prefill: must be positive, got {prefill}")
        return replace(
            self,
            prefill_s_per_token=self.prefill_s_per_token * factor * prefill,
            prefill_s_per_token_pair=self.prefill_s_per_token_pair * factor * prefill,
            decode_base_s=self.decode_base_s * factor,
            decode_s_per_seq=self.decode_s_per_seq * factor,
            decode_s_per_context_token=self.decode_s_per_context_token * factor,
        )

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens of keys and values."""
        return -(-tokens // self.block_size)


def prompt_pairs(tokens: float, before: float) -> float:
    """(Query, key) pairs of ``tokens`` prompt tokens computed after ``before`` tokens of
    the same sequence: each attends to every token before it and to itself."""
    return tokens * (before + (tokens + 1) / 2)


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _convert(name: str, default: object, raw: str) -> object:
    text = raw.strip()
    try:
        if isinstance(default, bool):
            if text.lower() not in _TRUE | _FALSE:
                raise ValueError("not a boolean")
            return text.lower() in _TRUE
        if isinstance(default, int):
            return int(text)
        return float(text)
    except ValueError:
        kind = type(default).__name__
        raise ValueError(f"{name}: {raw!r} is not of type {kind}") from None


def params_from_strings(values: Mapping[str, str]) -> EngineParams:
    """Parameters from text (a Triton model config's string parameters); a missing name
    keeps its default, an unknown one is refused so that a typo is not silently ignored."""
    defaults = EngineParams()
    known = {f.name for f in fields(EngineParams)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: not an engine parameter (known: {sorted(known)})")
    changed: dict[str, Any] = {
        name: _convert(name, getattr(defaults, name), raw) for name, raw in values.items()
    }
    return replace(defaults, **changed)
