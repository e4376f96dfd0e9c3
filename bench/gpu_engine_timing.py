"""Step times of a real transformer on an NVIDIA GPU, and the engine costs they imply.

    python3 bench/gpu_engine_timing.py --json OUT.json      # on a machine with a CUDA GPU
    .venv/bin/python bench/gpu_engine_timing.py --from-json OUT.json   # anywhere: the fit

The engine model (gpuserve/llm/params.py) prices a step as a fixed cost plus costs per
prompt token, per decoding sequence and per context token. Its defaults were first derived
from a datasheet; since this script's H100 run they are the measured H100 engine. This
script measures what they stand for: a Llama-3-8B-shaped decoder (32
layers, hidden 4096, 32 query and 8 key/value heads of 128, MLP 14336, vocabulary 128256)
with random bf16 weights — timing, not quality — runs

- decode steps: ``batch`` sequences each add one token after ``context`` cached tokens
  (keys and values in a preallocated cache, attention through PyTorch's fused
  scaled-dot-product kernel, the whole step captured as one CUDA graph, as vLLM captures
  its decode steps);
- prefill steps: one prompt of ``tokens`` tokens, causal attention, logits of its last
  token only;

then fits the four costs (gpuserve/llm/step_fit.py) and prints them beside the defaults.
It also measures the GPU's two ceilings (a large bf16 matrix product and a large copy) so
the step times can be read against them. Needs PyTorch with CUDA; the fit needs only the
standard library, so ``--from-json`` works on the recorded figures anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuserve.llm.params import EngineParams, prompt_pairs  # noqa: E402
from gpuserve.llm.step_fit import FittedCosts, fit_record  # noqa: E402


@dataclass(frozen=True)
class Shape:
    """A Llama-style decoder's shape (the defaults: Llama 3 8B)."""

    layers: int = 32
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    ffn: int = 14336
    vocab: int = 128256

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * 2  # keys and values, bf16

    @property
    def parameters(self) -> int:
        attention = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim
        attention += self.heads * self.head_dim * self.hidden
        return self.layers * (attention + 3 * self.hidden * self.ffn) + 2 * self.vocab * self.hidden


# Llama 3 8B, whose figures price every class (gpuserve/llm/gpus.py), and Llama 3.2 3B's
# layers with untied embeddings (3.6B parameters): a model those figures were not taken
# from, to check that they carry over.
SHAPES = {
    "llama-3-8b": Shape(),
    "llama-3b": Shape(layers=28, hidden=3072, heads=24, kv_heads=8, ffn=8192),
}


CONTEXTS = (256, 1024, 4096, 8192)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PROMPTS = (128, 256, 512, 1024, 2048, 4096, 8192)
# Decode grid cells hold batch x (context + 1) cached tokens: 32 GiB of keys and values at
# most, beside 16 GB of weights, fits an 80 GB card.
MAX_CACHED_TOKENS = 256 * 1025
# Mixed steps (vLLM's chunked prefill): one prompt chunk of CHUNKS tokens computed in the
# same step as MIXED_BATCHES sequences decoding at MIXED_CONTEXT.
MIXED_CONTEXT = 1024
MIXED_BATCHES = (16, 64, 128)
CHUNKS = (128, 512, 2048, 4096)
# Prompt chunks computed after CACHED tokens of the same prompt that are already in the
# cache (a prefix-cache hit, or the previous chunk): the engine model charges only the
# chunk's own tokens, so this measures what attending to the cached part costs.
CACHED = (0, 2048, 6144)
PREFIXED_CHUNKS = (128, 512, 2048)
PREFIX_MASKS = ("lower-right-gqa", "lower-right", "tensor")
# Prompts as long as the Mooncake traces' (12.8k tokens on average, many past 30k), alone
# and as a last chunk after most of them: (chunk tokens, cached before it), GQA kernel.
LONG_PROMPTS = ((8192, 0), (16384, 0), (32768, 0), (512, 30720), (2048, 14336), (2048, 30720))
LONG_REPLAYS = 5  # a 32k-token prompt takes seconds a step


def measure(shape: Shape, replays: int) -> dict[str, Any]:  # pragma: no cover - needs a GPU
    import torch
    import torch.nn.functional as F

    assert torch.cuda.is_available(), "a CUDA GPU is needed (use --from-json elsewhere)"
    dev = torch.device("cuda")
    bf16 = torch.bfloat16
    torch.manual_seed(0)

    def weight(*size: int) -> torch.Tensor:
        return torch.empty(*size, dtype=bf16, device=dev).normal_(0.0, 0.02)

    def median_ms(fn: Any, n: int) -> float:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        for s, e in zip(starts, ends, strict=True):
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))

    def ceilings() -> dict[str, float]:
        """The two ceilings: a bf16 matrix product and a device-to-device copy."""
        a, b = weight(8192, 8192), weight(8192, 8192)
        mm_ms = median_ms(lambda: a @ b, 10)
        src = torch.empty(2 << 30, dtype=torch.uint8, device=dev).random_(0, 255)
        dst = torch.empty_like(src)
        copy_ms = median_ms(lambda: dst.copy_(src), 10)
        return {
            "matmul_tflops": 2 * 8192**3 / (mm_ms / 1e3) / 1e12,
            "copy_tb_per_s": 2 * src.numel() / (copy_ms / 1e3) / 1e12,  # read + write
        }

    measured_ceilings = ceilings()
    torch.cuda.empty_cache()

    s = shape
    q_width, kv_width = s.heads * s.head_dim, s.kv_heads * s.head_dim
    layers = [
        {
            "norm1": torch.ones(s.hidden, dtype=bf16, device=dev),
            "qkv": weight(s.hidden, q_width + 2 * kv_width),
            "o": weight(q_width, s.hidden),
            "norm2": torch.ones(s.hidden, dtype=bf16, device=dev),
            "gate_up": weight(s.hidden, 2 * s.ffn),
            "down": weight(s.ffn, s.hidden),
        }
        for _ in range(s.layers)
    ]
    embed, lm_head = weight(s.vocab, s.hidden), weight(s.hidden, s.vocab)
    final_norm = torch.ones(s.hidden, dtype=bf16, device=dev)
    torch.cuda.synchronize()
    weights_bytes = torch.cuda.memory_allocated()

    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (s.hidden,), w, 1e-5)

    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + turned * sin

    def rope(length: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        inv = 1.0 / (500000.0 ** (torch.arange(0, s.head_dim, 2, device=dev) / s.head_dim))
        angles = torch.outer(torch.arange(offset, offset + length, device=dev), inv)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(bf16), angles.sin().to(bf16)

    def mlp(h: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        gate, up = (rms(h, layer["norm2"]) @ layer["gate_up"]).chunk(2, dim=-1)
        return h + (F.silu(gate) * up) @ layer["down"]

    cache = torch.empty(
        s.layers * 2 * MAX_CACHED_TOKENS * kv_width, dtype=bf16, device=dev
    ).uniform_(-1.0, 1.0)

    def decode_step_fn(batch: int, context: int) -> Any:
        kv = cache[: s.layers * 2 * batch * (context + 1) * kv_width].view(
            s.layers, 2, batch, s.kv_heads, context + 1, s.head_dim
        )
        ids = torch.randint(0, s.vocab, (batch,), device=dev)
        cos, sin = rope(1, context)
        group = s.heads // s.kv_heads

        def step() -> torch.Tensor:
            h = embed[ids]
            for i, layer in enumerate(layers):
                qkv = rms(h, layer["norm1"]) @ layer["qkv"]
                q, k, v = qkv.split((q_width, kv_width, kv_width), dim=-1)
                q = rotate(q.view(batch, s.heads, s.head_dim), cos, sin)
                k = rotate(k.view(batch, s.kv_heads, s.head_dim), cos, sin)
                kv[i, 0, :, :, context] = k
                kv[i, 1, :, :, context] = v.view(batch, s.kv_heads, s.head_dim)
                # One new token per sequence: the query heads sharing a key/value head
                # attend as that head's queries (no causal mask, every key is earlier).
                out = F.scaled_dot_product_attention(
                    q.view(batch, s.kv_heads, group, s.head_dim), kv[i, 0], kv[i, 1]
                )
                h = h + out.reshape(batch, q_width) @ layer["o"]
                h = mlp(h, layer)
            return (rms(h, final_norm) @ lm_head).argmax(dim=-1)

        return step

    def prefill_step_fn(tokens: int) -> Any:
        ids = torch.randint(0, s.vocab, (tokens,), device=dev)
        cos, sin = rope(tokens, 0)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        group = s.heads // s.kv_heads

        def step() -> torch.Tensor:
            h = embed[ids]
            for layer in layers:
                qkv = rms(h, layer["norm1"]) @ layer["qkv"]
                q, k, v = qkv.split((q_width, kv_width, kv_width), dim=-1)
                q = rotate(q.view(tokens, s.heads, s.head_dim), cos, sin).transpose(0, 1)
                k = rotate(k.view(tokens, s.kv_heads, s.head_dim), cos, sin).transpose(0, 1)
                v = v.view(tokens, s.kv_heads, s.head_dim).transpose(0, 1)
                out = F.scaled_dot_product_attention(
                    q.unsqueeze(0),
                    k.repeat_interleave(group, dim=0).unsqueeze(0),
                    v.repeat_interleave(group, dim=0).unsqueeze(0),
                    is_causal=True,
                )
                h = h + out[0].transpose(0, 1).reshape(tokens, q_width) @ layer["o"]
                h = mlp(h, layer)
            return (rms(h[-1:], final_norm) @ lm_head).argmax(dim=-1)

        return step

    def mixed_step_fn(batch: int, context: int, tokens: int, cached: int, mask: str) -> Any:
        """One step that computes ``tokens`` tokens of one prompt, after ``cached`` of its
        tokens already in the cache, beside ``batch`` sequences decoding at ``context``.
        Every row goes through the weights together, as in vLLM's chunked prefill; each
        part attends to its own keys. The prompt's keys sit at the cache's far end, away
        from the decoding sequences'.

        ``mask`` says how the chunk's causal mask reaches PyTorch, which picks the
        attention kernel by it: "causal" (``is_causal``, as the prefill grid; only with
        nothing cached, since it puts the diagonal top left), "tensor" (a boolean
        matrix), "lower-right" (PyTorch's bottom-right causal bias, which its flash
        kernel takes), "lower-right-gqa" (the same, each key/value head read in place
        by its query heads instead of copied for each of them, as vLLM's kernels do).
        Rows compared must agree on it."""
        span = cached + tokens
        decode_kv = cache[: s.layers * 2 * batch * (context + 1) * kv_width].view(
            s.layers, 2, batch, s.kv_heads, context + 1, s.head_dim
        )
        prompt_kv = cache[cache.numel() - s.layers * 2 * span * kv_width :].view(
            s.layers, 2, s.kv_heads, span, s.head_dim
        )
        rows = batch + tokens
        ids = torch.randint(0, s.vocab, (rows,), device=dev)
        d_cos, d_sin = rope(1, context)
        p_cos, p_sin = rope(tokens, cached)
        p_cos, p_sin = p_cos.unsqueeze(1), p_sin.unsqueeze(1)
        group = s.heads // s.kv_heads
        # The chunk's queries are the last ``tokens`` positions of ``span``.
        attn_mask: Any = None
        if mask == "tensor":
            attn_mask = (
                torch.arange(span, device=dev)[None, :]
                <= cached + torch.arange(tokens, device=dev)[:, None]
            )
        elif mask in ("lower-right", "lower-right-gqa"):
            from torch.nn.attention.bias import causal_lower_right

            attn_mask = causal_lower_right(tokens, span)
        else:
            assert mask == "causal" and cached == 0, "is_causal fits only a chunk alone"
        # Logits for every decoding sequence and the chunk's last token.
        last = torch.tensor([*range(batch), rows - 1], device=dev)

        def step() -> torch.Tensor:
            h = embed[ids]
            for i, layer in enumerate(layers):
                qkv = rms(h, layer["norm1"]) @ layer["qkv"]
                q, k, v = qkv.split((q_width, kv_width, kv_width), dim=-1)
                parts = []
                if batch:
                    dq = rotate(q[:batch].view(batch, s.heads, s.head_dim), d_cos, d_sin)
                    dk = rotate(k[:batch].view(batch, s.kv_heads, s.head_dim), d_cos, d_sin)
                    decode_kv[i, 0, :, :, context] = dk
                    decode_kv[i, 1, :, :, context] = v[:batch].view(batch, s.kv_heads, s.head_dim)
                    out = F.scaled_dot_product_attention(
                        dq.view(batch, s.kv_heads, group, s.head_dim),
                        decode_kv[i, 0],
                        decode_kv[i, 1],
                    )
                    parts.append(out.reshape(batch, q_width))
                pq = rotate(q[batch:].view(tokens, s.heads, s.head_dim), p_cos, p_sin)
                pk = rotate(k[batch:].view(tokens, s.kv_heads, s.head_dim), p_cos, p_sin)
                prompt_kv[i, 0, :, cached:] = pk.transpose(0, 1)
                prompt_kv[i, 1, :, cached:] = (
                    v[batch:].view(tokens, s.kv_heads, s.head_dim).transpose(0, 1)
                )
                if mask == "lower-right-gqa":
                    keys, values = prompt_kv[i, 0], prompt_kv[i, 1]
                else:
                    keys = prompt_kv[i, 0].repeat_interleave(group, dim=0)
                    values = prompt_kv[i, 1].repeat_interleave(group, dim=0)
                out = F.scaled_dot_product_attention(
                    pq.transpose(0, 1).unsqueeze(0),
                    keys.unsqueeze(0),
                    values.unsqueeze(0),
                    attn_mask=attn_mask,
                    is_causal=attn_mask is None,
                    enable_gqa=mask == "lower-right-gqa",
                )
                parts.append(out[0].transpose(0, 1).reshape(tokens, q_width))
                h = h + torch.cat(parts) @ layer["o"]
                h = mlp(h, layer)
            return (rms(h[last], final_norm) @ lm_head).argmax(dim=-1)

        return step

    def timed_or_none(label: str, step: Any, n: int = replays) -> float | None:
        """Seconds one graphed step takes, or None (and why, printed) where it fails:
        the grids added later must not cost the run the ones before them."""
        try:
            ms = median_ms(graphed(step), n)
        except Exception as error:
            print(f"{label}: failed: {error!r}", flush=True)
            return None
        print(f"{label}: {ms:8.3f} ms", flush=True)
        return ms / 1e3

    def graphed(step: Any) -> Any:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.no_grad():
            step()
        return graph.replay

    decode: list[dict[str, float]] = []
    started = time.monotonic()
    for context in CONTEXTS:
        for batch in BATCHES:
            if batch * (context + 1) > MAX_CACHED_TOKENS:
                continue
            ms = median_ms(graphed(decode_step_fn(batch, context)), replays)
            decode.append({"batch": batch, "context": context, "seconds": ms / 1e3})
            print(f"decode batch {batch:4d} context {context:5d}: {ms:8.3f} ms", flush=True)
    with torch.no_grad():
        eager_ms = median_ms(decode_step_fn(1, 1024), replays)
    prefill: list[dict[str, float]] = []
    for tokens in PROMPTS:
        ms = median_ms(graphed(prefill_step_fn(tokens)), replays)
        prefill.append({"tokens": tokens, "seconds": ms / 1e3})
        print(f"prefill {tokens:5d} tokens: {ms:8.3f} ms", flush=True)
    mixed: list[dict[str, float]] = []
    for batch in MIXED_BATCHES:
        for tokens in CHUNKS:
            if batch + tokens > 8192:  # vLLM's default max_num_batched_tokens
                continue
            seconds = timed_or_none(
                f"mixed batch {batch:4d} context {MIXED_CONTEXT} + chunk {tokens:5d}",
                mixed_step_fn(batch, MIXED_CONTEXT, tokens, 0, "causal"),
            )
            if seconds is not None:
                mixed.append(
                    {"batch": batch, "context": MIXED_CONTEXT, "tokens": tokens, "seconds": seconds}
                )
    prefixed: list[dict[str, Any]] = []
    for mask in PREFIX_MASKS:
        for cached in CACHED:
            for tokens in PREFIXED_CHUNKS:
                seconds = timed_or_none(
                    f"chunk {tokens:5d} after {cached:5d} cached, {mask} mask",
                    mixed_step_fn(0, 0, tokens, cached, mask),
                )
                if seconds is not None:
                    prefixed.append(
                        {"tokens": tokens, "cached": cached, "mask": mask, "seconds": seconds}
                    )
    for tokens, cached in LONG_PROMPTS:
        seconds = timed_or_none(
            f"chunk {tokens:5d} after {cached:5d} cached, lower-right-gqa mask",
            mixed_step_fn(0, 0, tokens, cached, "lower-right-gqa"),
            LONG_REPLAYS,
        )
        if seconds is not None:
            prefixed.append(
                {"tokens": tokens, "cached": cached, "mask": "lower-right-gqa", "seconds": seconds}
            )
    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name,
        "parameters": shape.parameters,
        "memory_bytes": props.total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "shape": asdict(shape),
        "weights_bytes": weights_bytes,
        "ceilings": measured_ceilings,
        "eager_decode_batch1_context1024_s": eager_ms / 1e3,
        "replays": replays,
        "decode": decode,
        "prefill": prefill,
        "mixed": mixed,
        "prefixed": prefixed,
        "wall_s": time.monotonic() - started,
    }


def kv_blocks(record: dict[str, Any], utilisation: float = 0.9, block: int = 16) -> int:
    """KV blocks vLLM would make at ``utilisation`` of the card, less weights and ~3 GB
    of activations (the same allowance as the defaults' derivation)."""
    free = utilisation * record["memory_bytes"] - record["weights_bytes"] - 3e9
    return int(free // (Shape(**record["shape"]).kv_bytes_per_token * block))


def predicted(record: dict[str, Any]) -> EngineParams | None:
    """What gpuserve/llm/gpus.py derives for this model on this GPU from the datasheet;
    None where the API package is not installed (a bare GPU machine) or the GPU unknown."""
    try:
        from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec
        from gpuserve.llm.gpus import engine_params_for_class
    except ImportError:
        return None
    shape = Shape(**record["shape"])
    spec = InferenceServiceSpec.model_validate(
        {
            "model": {"name": "m", "storageUri": "pvc://m/m", "format": "vllm"},
            "precision": "bf16",
            "slo": {"latency": "30s", "tpot": "50ms"},
            "accelerators": {"classes": ["gpu"]},
            "llm": {
                "weightBytes": str(record["weights_bytes"]),
                "kvCacheBytesPerToken": shape.kv_bytes_per_token,
                "queryHeadsPerKvHead": shape.heads // shape.kv_heads,
                "maxContextLength": 8192,
            },
        }
    )
    product = "NVIDIA-" + str(record["device"]).removeprefix("NVIDIA ").replace(" ", "-")
    cls = AcceleratorClassSpec.model_validate({"gpuProduct": product})
    return engine_params_for_class(spec, cls, EngineParams())


def report(record: dict[str, Any]) -> None:
    costs = fit_record(record)
    defaults = EngineParams()
    print(
        f"\n{record['device']}, torch {record['torch']} (CUDA {record['cuda']}), "
        f"{record['replays']} replays per point, median"
    )
    ceil = record["ceilings"]
    print(
        f"ceilings: bf16 matmul {ceil['matmul_tflops']:.0f} TFLOP/s, "
        f"copy {ceil['copy_tb_per_s']:.2f} TB/s (read + write); weights "
        f"{record['weights_bytes'] / 1e9:.2f} GB -> one read "
        f"{record['weights_bytes'] / (ceil['copy_tb_per_s'] / 2 * 1e12) * 1e3:.2f} ms"
    )
    rule = costs.applied_to(EngineParams())
    print("\n| batch | context | measured ms | fitted ms | error |")
    print("|---|---|---|---|---|")
    for d in record["decode"]:
        model = rule.step_cost_s(0, d["batch"], d["batch"] * d["context"])
        print(
            f"| {d['batch']} | {d['context']} | {d['seconds'] * 1e3:.3f} | "
            f"{model * 1e3:.3f} | {model / d['seconds'] - 1:+.1%} |"
        )
    print("\n| prompt tokens | measured ms | fitted ms | error | tokens/s |")
    print("|---|---|---|---|---|")
    for p in record["prefill"]:
        model = rule.prefill_step_s(p["tokens"])
        print(
            f"| {p['tokens']} | {p['seconds'] * 1e3:.3f} | {model * 1e3:.3f} | "
            f"{model / p['seconds'] - 1:+.1%} | {p['tokens'] / p['seconds']:,.0f} |"
        )
    print(
        f"\neager (no CUDA graph) decode, batch 1, context 1024: "
        f"{record['eager_decode_batch1_context1024_s'] * 1e3:.2f} ms"
    )
    report_mixed(record, costs)
    derived = predicted(record)
    print(
        "\n| cost | EngineParams default (8B, H100) | measured fit | measured / default "
        "| gpus.py for this model and GPU | measured / gpus.py |"
    )
    print("|---|---|---|---|---|---|")
    for name in (
        "decode_base_s",
        "decode_s_per_seq",
        "decode_s_per_context_token",
        "prefill_s_per_token",
        "prefill_s_per_token_pair",
    ):
        ours, theirs = getattr(costs, name), getattr(defaults, name)
        mine = getattr(derived, name) if derived is not None else float("nan")
        print(
            f"| `{name}` | {theirs:.3g} | {ours:.3g} | {ours / theirs:.2f} | {mine:.3g} "
            f"| {ours / mine:.2f} |"
        )
    blocks = kv_blocks(record)
    print(
        f"| `num_blocks` (90% of the card) | {defaults.num_blocks} | {blocks} | "
        f"{blocks / defaults.num_blocks:.2f} | "
        f"{derived.num_blocks if derived is not None else '-'} | |"
    )
    print(
        f"\nworst fit error: decode {costs.decode_worst_error:.1%}, "
        f"prefill {costs.prefill_worst_error:.1%}"
    )


def report_mixed(record: dict[str, Any], costs: FittedCosts) -> None:
    """Mixed and prefixed steps (recorded from 2026-11-26 on) against the additive rule
    the simulator prices them by, and against the same work in separate steps."""
    decode = {(d["batch"], d["context"]): d["seconds"] for d in record["decode"]}
    prefill = {p["tokens"]: p["seconds"] for p in record["prefill"]}
    rule = costs.applied_to(EngineParams())
    if record.get("mixed"):
        print(
            "\n| decoding batch | context | chunk tokens | measured ms | rule ms | rule error "
            "| decode step + prefill step, measured apart | mixed / apart |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for m in record["mixed"]:
            model = rule.step_cost_s(
                m["tokens"], m["batch"], m["batch"] * m["context"], prompt_pairs(m["tokens"], 0)
            )
            apart = decode.get((m["batch"], m["context"]), float("nan")) + prefill.get(
                m["tokens"], float("nan")
            )
            print(
                f"| {m['batch']} | {m['context']} | {m['tokens']} | {m['seconds'] * 1e3:.3f} "
                f"| {model * 1e3:.3f} | {model / m['seconds'] - 1:+.1%} | {apart * 1e3:.3f} "
                f"| {m['seconds'] / apart:.2f} |"
            )
    prefixed = record.get("prefixed", [])
    for mask in sorted({p.get("mask", "tensor") for p in prefixed}):
        rows = [p for p in prefixed if p.get("mask", "tensor") == mask]
        alone = {p["tokens"]: p["seconds"] for p in rows if p["cached"] == 0}
        print(
            f"\n{mask} mask\n\n| chunk tokens | cached before it | measured ms | same chunk, "
            "nothing cached | extra ms per 1,000 cached tokens | rule ms | rule error |"
        )
        print("|---|---|---|---|---|---|---|")
        for p in rows:
            model = rule.prefill_step_s(p["tokens"], p["cached"])
            base = alone.get(p["tokens"], float("nan"))
            extra = (p["seconds"] - base) / p["cached"] * 1e6 if p["cached"] else 0.0
            print(
                f"| {p['tokens']} | {p['cached']} | {p['seconds'] * 1e3:.3f} | "
                f"{base * 1e3:.3f} | {extra:.3f} | {model * 1e3:.3f} | "
                f"{model / p['seconds'] - 1:+.1%} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the measurements here")
    parser.add_argument("--from-json", type=Path, help="fit recorded measurements, no GPU")
    parser.add_argument("--replays", type=int, default=20, help="timed replays per point")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3-8b")
    args = parser.parse_args()
    if args.from_json is not None:
        record = json.loads(args.from_json.read_text())
    else:
        record = measure(SHAPES[args.shape], args.replays)
        if args.json is not None:
            args.json.write_text(json.dumps(record, indent=1) + "\n")
    report(record)


if __name__ == "__main__":
    main()
