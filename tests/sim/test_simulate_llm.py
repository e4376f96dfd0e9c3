"""`gpuserve simulate` on an LLM service: the shipped example and slices of the shipped
Azure and Mooncake traces, through the token-level cluster simulator."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from simulate_helpers import burst_trace, simulate, steady_trace

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama-vllm.yaml"
AZURE = ROOT / "traces" / "azure-llm-conv-2023.csv"
MOONCAKE = ROOT / "traces" / "mooncake-conversation-2025.jsonl"
H100_PER_HOUR = 6.98  # examples/accelerator-classes.yaml


def _slice(source: Path, lines: int, out: Path) -> Path:
    """The first ``lines`` lines of a shipped trace (a header counts as one)."""
    out.write_text("\n".join(source.read_text().splitlines()[:lines]) + "\n")
    return out


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in:\n{text}"
    return float(found.group(1))


def _check_prediction(out: str, *, gpus_per_pod: int) -> tuple[float, int, float]:
    """The figures hold together; returns (GPU-hours, max replicas, seconds served)."""
    for name in ("TTFT", "TPOT", "both"):
        assert 0.0 <= _number(rf"{name} ([\d.]+)%", out) <= 100.0
    hours = _number(r"GPU-hours ([\d.]+)", out)
    cost = _number(r"cost ([\d.]+)", out)
    most = int(_number(r"max replicas (\d+)", out))
    end = _number(r"served until (\d+)s", out)
    tokens = _number(r"per million output tokens \((\d+) tokens\)", out)
    assert hours > 0 and 1 <= most <= 8  # the example's maxReplicas
    # Never more than the largest replica count held for the whole run (a replica may
    # drain past the last token by a step: a small allowance).
    assert hours <= most * gpus_per_pod * (end + 5) / 3600
    # Each figure is printed rounded: compared within that rounding.
    assert cost == pytest.approx(hours * H100_PER_HOUR, abs=0.001)
    per_million = _number(r"([\d.]+) per million output tokens", out)
    assert per_million == pytest.approx(hours * H100_PER_HOUR / tokens * 1e6, rel=0.02)
    return hours, most, end


@pytest.mark.parametrize("policy", ["gpuserve", "oracle", "keda-waiting", "hpa-kv", "planner-like"])
def test_azure_slice_on_the_vllm_example_prints_the_prediction_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    trace = _slice(AZURE, 301, tmp_path / "azure.csv")
    plot = tmp_path / "llm.png"
    code, out, err = simulate(
        capsys, EXAMPLE, trace, "--compress", "4", "--plot", str(plot), "--policy", policy
    )
    assert code == 0, err
    # The engine of the first class the service names, from its datasheet.
    assert "engine: derived for class h100 from the NVIDIA-H100-80GB-HBM3 datasheet" in out
    assert "trace: azure.csv (azure x4): 300 requests" in out  # named by its file
    assert "objectives: TTFT 800ms, TPOT 60ms, met by 95%" in out
    assert f"policy {policy}, routing random" in out
    _check_prediction(out, gpus_per_pod=1)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_least_loaded_routing_is_a_choice_for_llm_services(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _slice(AZURE, 301, tmp_path / "azure.csv")
    args = ("--compress", "4", "--routing", "least_loaded")
    code, out, err = simulate(capsys, EXAMPLE, trace, *args)
    assert code == 0, err
    assert "policy gpuserve, routing least_loaded" in out
    _check_prediction(out, gpus_per_pod=1)


def test_mooncake_slice_with_prefix_routing_and_two_gpus_per_replica(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 128k context serves Mooncake's long prompts; two GPUs per replica double the
    # GPU-hours of the same replica-hours.
    text = EXAMPLE.read_text().replace("maxContextLength: 8192", "maxContextLength: 131072")
    text = text.replace("prefixCaching: true", "prefixCaching: true\n    tensorParallelSize: 2")
    text = text.replace("classes: [h100, a100-3g40gb, l4]", "classes: [h100]\n    gpusPerPod: 2")
    service = tmp_path / "llama.yaml"
    service.write_text(text)
    trace = _slice(MOONCAKE, 120, tmp_path / "moon.jsonl")
    code, out, err = simulate(
        capsys, service, trace, "--compress", "2", "--routing", "prefix", "--policy", "static"
    )
    assert code == 0, err
    assert "(moon x2): 120 requests" in out and "refused" not in out
    assert "x 512 tokens" in out  # the cache counted in the trace's hash blocks
    assert "policy static-peak, routing prefix" in out
    hours, most, end = _check_prediction(out, gpus_per_pod=2)
    # Static provisioning holds its replicas the whole run.
    assert hours == pytest.approx(most * 2 * end / 3600, rel=0.05, abs=0.002)


def _rehashed(source: Path, out: Path, block: int) -> Path:
    """``source``'s rows with their prompts hashed in ``block``-token blocks: each
    512-token id becomes 512 / block ids, the prompt's last ones dropped past its length,
    so prompts share exactly the prefixes they shared."""
    rows = []
    for line in source.read_text().splitlines():
        row = json.loads(line)
        per = 512 // block
        finer = [h * per + k for h in row["hash_ids"] for k in range(per)]
        row["hash_ids"] = finer[: -(-row["input_length"] // block)]
        rows.append(json.dumps(row))
    out.write_text("\n".join(rows) + "\n")
    return out


def test_a_trace_hashed_in_other_blocks_is_read_in_its_own_and_a_mismatch_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = tmp_path / "llama.yaml"
    service.write_text(
        EXAMPLE.read_text().replace("maxContextLength: 8192", "maxContextLength: 131072")
    )
    trace = _slice(MOONCAKE, 120, tmp_path / "moon.jsonl")
    hits: dict[int, float] = {}
    for block in (512, 16):
        hashed = _rehashed(trace, tmp_path / f"moon{block}.jsonl", block)
        code, out, err = simulate(capsys, service, hashed, "--routing", "prefix")
        assert code == 0, err
        assert f"prefix hashes of {block}-token blocks" in out
        assert f"x {block} tokens" in out  # the cache counted in the trace's blocks
        hits[block] = _number(r"prefix-cache hits ([\d.]+)% of prompt tokens", out)
    # Read as 512-token blocks, the finer ids would share a 32nd of what they do.
    assert 0 < hits[512] <= hits[16] < 2 * hits[512], hits
    rows = trace.read_text().splitlines()
    third = json.loads(rows[2])
    third["hash_ids"] = third["hash_ids"] + [1, 2, 3]  # three more ids than its prompt has
    rows[2] = json.dumps(third)
    trace.write_text("\n".join(rows) + "\n")
    code, _, err = simulate(capsys, service, trace)
    assert code == 1 and "line 3: " in err and "no number of tokens per id fits it" in err, err


def test_requests_longer_than_the_context_are_refused_and_count_as_missed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _slice(MOONCAKE, 60, tmp_path / "moon.jsonl")
    code, out, err = simulate(capsys, EXAMPLE, trace, "--compress", "2")
    assert code == 0, err
    refused = int(_number(r"refused: (\d+) request", out))
    assert 0 < refused < 60
    # The trace line counts the file's requests; the refused line says how many are replayed.
    assert ": 60 requests over" in out and f"; {60 - refused} replayed" in out, out
    served = _number(r"both ([\d.]+)% \(objective", out)
    overall = _number(r"of all 60 requests: both ([\d.]+)%", out)
    assert overall == pytest.approx(served * (60 - refused) / 60, abs=0.01)


def _bursts(path: Path, starts: tuple[float, ...]) -> Path:
    """10 s at 120 req/s of 1,000-token prompts from each of ``starts``, over 1 req/s:
    several times what one H100 replica serves within the example's TTFT."""
    return burst_trace(path, starts, per_second=120, context=1000, generated=100)


def test_bursts_shorter_than_a_start_up_that_outran_the_replicas_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = simulate(capsys, EXAMPLE, _bursts(tmp_path / "b.csv", (300.0, 500.0)))
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("BurstsCovered="))
    assert line.startswith("BurstsCovered=False ShortBurstsOutranReadyPods (at the tallest"), line
    assert "with 1 pod ready" in line and "start-up (45 s)" in line, line
    needed = int(_number(r"pods? ready; (\d+) serve it", line))
    assert 1 < needed <= 8, line  # within the example's maxReplicas: no "more than"


def test_steady_token_traffic_outruns_nothing_and_the_baselines_say_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steady = _bursts(tmp_path / "s.csv", ())
    code, out, err = simulate(capsys, EXAMPLE, steady)
    assert code == 0, err
    assert "BurstsCovered=True WithinReadyCapacity (throughout)" in out, out
    assert "ScalingLimited=False DesiredWithinRange (throughout)" in out, out
    bursts = _bursts(tmp_path / "b.csv", (300.0,))
    for policy in ("keda-waiting", "oracle"):
        _, out, _ = simulate(capsys, EXAMPLE, bursts, "--policy", policy)
        assert f"policy {policy}" in out and "BurstsCovered" not in out, out
        assert "ScalingLimited" not in out, out


def test_a_class_not_given_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _slice(AZURE, 20, tmp_path / "azure.csv")
    code = main(["simulate", "-f", str(EXAMPLE), "--trace", str(trace)])
    assert code == 1
    assert "AcceleratorClass 'h100', 'a100-3g40gb', 'l4' not given" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "policy", "message"),
    [
        (("ttft: 800ms, tpot: 60ms, ", ""), "gpuserve", "slo.ttft, slo.tpot"),
        (("", ""), "hpa", "--policy hpa: a request-level policy"),
    ],
)
def test_input_errors_name_the_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: tuple[str, str],
    policy: str,
    message: str,
) -> None:
    service = tmp_path / "llama.yaml"
    service.write_text(EXAMPLE.read_text().replace(*edit))
    trace = _slice(AZURE, 20, tmp_path / "azure.csv")
    code, _, err = simulate(capsys, service, trace, "--policy", policy)
    assert code == 1 and message in err, err


def test_an_llm_policy_on_a_request_level_service_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,1,1\n1,1,1\n")
    service = ROOT / "examples" / "sleeper-interactive.yaml"
    code, _, err = simulate(capsys, service, trace, "--policy", "hpa-kv")
    assert code == 1 and "--policy hpa-kv: a policy for LLM services" in err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--warmup", "300"), "--warmup"),
        (("--warmup", "0"), "--warmup"),
        (("--tokens-per-item", "512"), "--tokens-per-item"),
        (("--tokens-per-item", "0"), "--tokens-per-item"),
    ],
)
def test_request_level_flags_on_an_llm_service_are_refused_not_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, str], named: str
) -> None:
    trace = _slice(AZURE, 20, tmp_path / "azure.csv")
    code, out, err = simulate(capsys, EXAMPLE, trace, *flags)
    assert code == 1, out
    assert "is an LLM service, replayed token by token" in err and named in err, err
    assert "applies to request-level services only" in err


def test_a_request_level_service_still_takes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _slice(AZURE, 200, tmp_path / "azure.csv")
    service = ROOT / "examples" / "sleeper-interactive.yaml"
    code, out, err = simulate(capsys, service, trace, "--warmup", "0", "--tokens-per-item", "512")
    assert code == 0, err
    assert "sleeper-chat: policy gpuserve" in out and "attainment" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("TIMESTAMP,Tokens\n", "line 1: header: no column ContextTokens or GeneratedTokens"),
        ('{"timestamp": 0, "input_length": 10}\n', "missing field 'output_length'"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests"),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n",
            "line 2: TIMESTAMP: 'yesterday' is neither a date-time nor seconds",
        ),
    ],
)
def test_a_bad_trace_is_named_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    trace = tmp_path / "bad.trace"
    trace.write_text(content)
    code, _, err = simulate(capsys, EXAMPLE, trace)
    assert code == 1 and str(trace) in err and message in err, err
    assert "Traceback" not in err


def _with_acme(tmp_path: Path, classes: str, *, price: float) -> Path:
    """The example service naming ``classes``, beside a class ``acme`` whose GPU has no
    datasheet."""
    service = tmp_path / "llama.yaml"
    service.write_text(
        EXAMPLE.read_text().replace("classes: [h100, a100-3g40gb, l4]", f"classes: {classes}")
        + "---\napiVersion: gpuserve.io/v1alpha1\nkind: AcceleratorClass\n"
        f"metadata: {{name: acme}}\nspec: {{gpuProduct: ACME-X1, costPerHour: {price}}}\n"
    )
    return service


def test_a_class_without_a_datasheet_runs_on_the_default_engine_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = _with_acme(tmp_path, "[acme]", price=1.5)
    trace = _slice(AZURE, 40, tmp_path / "azure.csv")
    code = main(["simulate", "-f", str(service), "--trace", str(trace)])
    out = capsys.readouterr().out
    assert code == 0
    assert "engine: the defaults" in out and "(no datasheet for ACME-X1)" in out
    assert "at 1.5/h per GPU" in out


def test_a_plot_that_cannot_be_written_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _slice(AZURE, 40, tmp_path / "azure.csv")
    plot = tmp_path / "missing" / "out.png"
    code, _, err = simulate(capsys, EXAMPLE, trace, "--plot", str(plot))
    assert code == 1 and f"--plot {plot}: No such file or directory" in err, err


# --compare-classes: each class the service names, alone, on the same trace and policy.

A100_1G10GB = "classes: [h100, a100-3g40gb, l4, a100-1g10gb]"
FIGURES = 10  # numeric columns after the GPU column (which may hold a space)


def _table(out: str, names: tuple[str, ...]) -> dict[str, list[str]]:
    """Each class's row of the comparison: its last ``FIGURES`` cells."""
    rows: dict[str, list[str]] = {}
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0] in names:
            rows[cells[0]] = cells[-FIGURES:]
    assert set(rows) == set(names), out
    return rows


def _compare(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, edit: tuple[str, str], *extra: str
) -> tuple[int, str, str]:
    service = tmp_path / "llama.yaml"
    service.write_text(EXAMPLE.read_text().replace(*edit))
    trace = _slice(AZURE, 301, tmp_path / "azure.csv")
    return simulate(capsys, service, trace, "--compare-classes", *extra)


def test_compare_classes_lists_every_class_and_one_that_cannot_hold_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _compare(capsys, tmp_path, ("classes: [h100, a100-3g40gb, l4]", A100_1G10GB))
    assert code == 0, err
    rows = _table(out, ("h100", "a100-3g40gb", "l4", "a100-1g10gb"))
    assert "NVIDIA-A100-SXM4-80GB 3g.40gb" in out and "NVIDIA-A100-SXM4-80GB 1g.10gb" in out
    # 15 GiB of bf16 weights cannot sit in a 10 GiB slice: listed, not simulated.
    assert rows["a100-1g10gb"] == ["-"] * FIGURES
    assert "a100-1g10gb: not simulated, does not fit: needs 14.9 GiB of weights" in out
    h100, l4 = ([float(c) for c in rows[n]] for n in ("h100", "l4"))
    for name in ("h100", "a100-3g40gb", "l4"):
        step, prefill, blocks, ttft, tpot, both, hours, cost, per_m, most = map(float, rows[name])
        assert step > 0 and prefill > 0 and blocks > 0
        assert 0 <= both <= min(ttft, tpot) <= 100
        assert hours > 0 and 1 <= most <= 8
        per_hour = {"h100": H100_PER_HOUR, "a100-3g40gb": 1.90, "l4": 0.80}[name]
        assert cost == pytest.approx(hours * per_hour, abs=0.002)
        assert per_m > cost  # 300 requests: far fewer than a million output tokens
    # Each class its own engine: the L4 is slower per token and holds fewer KV blocks ...
    assert l4[0] > h100[0] and l4[2] < h100[2]
    # ... so the same load takes it at least as many replicas and more GPU-hours.
    assert l4[9] >= h100[9] and l4[6] > h100[6]


def test_compare_classes_names_the_cheapest_class_that_meets_the_objectives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Looser objectives that a slower, cheaper class can meet.
    edit = ("ttft: 800ms, tpot: 60ms", "ttft: 3s, tpot: 150ms")
    code, out, err = _compare(capsys, tmp_path, edit)
    assert code == 0, err
    rows = _table(out, ("h100", "a100-3g40gb", "l4"))
    met = {name: float(r[7]) for name, r in rows.items() if float(r[5]) >= 95.0}
    best = re.search(r"cheapest meeting both objectives for 95% of requests: (\S+)", out)
    assert best, out
    assert best.group(1) in met and met[best.group(1)] == min(met.values())
    assert len(met) >= 2  # a choice was made, not the only class that passed


def test_compare_classes_names_the_closest_when_none_meets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No engine reaches a 5ms time per output token.
    code, out, err = _compare(capsys, tmp_path, ("tpot: 60ms", "tpot: 5ms"))
    assert code == 0, err
    rows = _table(out, ("h100", "a100-3g40gb", "l4"))
    assert "cheapest meeting" not in out
    closest = re.search(r"no class meets both objectives for 95% of requests; closest: (\S+)", out)
    assert closest, out
    both = {name: float(r[5]) for name, r in rows.items()}
    assert both[closest.group(1)] == max(both.values())


def test_compare_classes_lists_a_class_without_a_datasheet_unsimulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = _with_acme(tmp_path, "[h100, acme]", price=0.1)
    trace = _slice(AZURE, 301, tmp_path / "azure.csv")
    plot = tmp_path / "c.png"
    code, out, err = simulate(capsys, service, trace, "--compare-classes", "--plot", str(plot))
    assert code == 0, err
    # The defaults would price it as an H100 at a tenth of the price: not a comparison.
    assert _table(out, ("h100", "acme"))["acme"] == ["-"] * FIGURES
    assert "acme: not simulated, no datasheet for ACME-X1" in out
    assert "cheapest meeting both objectives for 95% of requests: h100" in out
    # One plot per simulated class, named after it.
    assert (tmp_path / "c-h100.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "c-acme.png").exists() and not (tmp_path / "c.png").exists()


def test_compare_classes_needs_every_class_and_an_llm_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _slice(AZURE, 20, tmp_path / "azure.csv")
    code = main(["simulate", "-f", str(EXAMPLE), "--trace", str(trace), "--compare-classes"])
    assert code == 1
    assert "AcceleratorClass 'h100', 'a100-3g40gb', 'l4' not given" in capsys.readouterr().err
    service = ROOT / "examples" / "sleeper-interactive.yaml"
    code, _, err = simulate(capsys, service, trace, "--compare-classes")
    assert code == 1 and "--compare-classes: LLM services only" in err, err


def test_the_run_is_on_the_class_placement_uses_and_a_class_that_cannot_hold_the_model_stops_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _slice(AZURE, 40, tmp_path / "azure.csv")
    # The 10-GiB slice first: placement skips it (memoryGiB is too small for 15 GiB of
    # weights), so the service runs on the H100, as the operator would place it.
    service = tmp_path / "slice-first.yaml"
    service.write_text(
        EXAMPLE.read_text().replace(
            "classes: [h100, a100-3g40gb, l4]", "classes: [a100-1g10gb, h100]"
        )
    )
    code, out, err = simulate(capsys, service, trace)
    assert code == 0, err
    assert out.startswith("placement skips: AcceleratorClass 'a100-1g10gb' is too small"), out
    assert "class h100: NVIDIA-H100-80GB-HBM3" in out and f"at {H100_PER_HOUR}/h" in out
    # A 70B model on an L4 whose class states no memoryGiB: placement would put it there,
    # and it would not load. No figure is made up for it.
    big = tmp_path / "big.yaml"
    big.write_text(
        EXAMPLE.read_text()
        .replace("parameters: 8B", "parameters: 70B")
        .replace("classes: [h100, a100-3g40gb, l4]", "classes: [bare-l4, h100]")
        + "---\napiVersion: gpuserve.io/v1alpha1\nkind: AcceleratorClass\n"
        "metadata: {name: bare-l4}\nspec: {gpuProduct: NVIDIA-L4, costPerHour: 0.8}\n"
    )
    code, out, err = simulate(capsys, big, trace)
    assert code == 1 and "attainment" not in out
    assert "class bare-l4, where placement puts it, cannot hold the model (does not fit" in err
    code, out, err = simulate(capsys, big, trace, "--compare-classes")
    assert code == 0 and "bare-l4: not simulated, does not fit" in out, err


def test_compare_classes_lists_a_class_placement_skips_unsimulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An fp8 KV cache needs compute capability 8.9: placement skips the A100 slice, so a
    # figure for it would describe pods that never run; a spec no class can run is listed
    # with the reasons, not refused.
    fp8 = EXAMPLE.read_text().replace(
        "    prefixCaching: true", "    prefixCaching: true\n    kvCacheDtype: fp8"
    )
    service = tmp_path / "fp8.yaml"
    service.write_text(
        fp8.replace("classes: [h100, a100-3g40gb, l4]", "classes: [a100-3g40gb, h100]")
    )
    trace = _slice(AZURE, 61, tmp_path / "azure.csv")
    code, out, err = simulate(capsys, service, trace, "--compare-classes")
    assert code == 0, err
    rows = _table(out, ("a100-3g40gb", "h100"))
    assert rows["a100-3g40gb"] == ["-"] * FIGURES and rows["h100"] != ["-"] * FIGURES
    assert "a100-3g40gb: not simulated, llm.kvCacheDtype fp8 needs a newer GPU" in out, out
    assert "cheapest meeting both objectives" in out and "h100" in out.splitlines()[-1]
    only = tmp_path / "only-a100.yaml"
    only.write_text(fp8.replace("classes: [h100, a100-3g40gb, l4]", "classes: [a100-3g40gb]"))
    code, out, err = simulate(capsys, only, trace, "--compare-classes")
    assert code == 0 and "no class was simulated" in out, err
    code, _, err = simulate(capsys, only, trace)
    assert code == 1 and "accelerators.classes: no class can run the service" in err


def test_the_trace_mix_is_printed_beside_the_one_the_service_states(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `spec.llm.expectedTokens` should say for this traffic, and what it says."""
    trace = steady_trace(tmp_path)  # 100-token prompts, 10 output tokens
    code, out, err = simulate(capsys, EXAMPLE, trace)
    assert code == 0, err
    assert "token mix: prompts 100 tokens on average (100 at p95), 10 output tokens" in out
    assert "llm.expectedTokens {prompt: 1000, output: 200, promptHigh: 4000}" in out
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"]["llm"]["expectedTokens"] = {"prompt": 100, "output": 10}
    stated = tmp_path / "stated.yaml"
    stated.write_text(yaml.safe_dump(body))
    code, out, err = simulate(capsys, stated, trace)
    assert code == 0, err
    assert "llm.expectedTokens {prompt: 100, output: 10, promptHigh: 400}" in out
