"""`gpuserve simulate` and the benches on a user's mistakes: each is refused with one line
naming the flag, field or file, before any simulation runs, and the inputs a prediction
rests on are said as they are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from simulate_helpers import simulate, steady_trace

from cli.main import main
from cli.trace_files import quiet_note, trace_lines
from gpuserve.api.models import parse_inference_service
from gpuserve.autoscaling.from_spec import DEFAULT_TIME_PER_BATCH_S, service_profile
from gpuserve.sim.llm.traces import mooncake
from gpuserve.sim.workload import parse_trace

ROOT = Path(__file__).resolve().parents[2]
RESNET = ROOT / "examples" / "resnet50-onnx-fp16.yaml"
SLEEPER = ROOT / "examples" / "sleeper-interactive.yaml"
LLAMA = ROOT / "examples" / "llama-vllm.yaml"


@pytest.mark.parametrize("value", ["0", "-2", "nan", "inf", "fast"])
def test_a_compression_that_is_not_a_positive_number_is_refused_by_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    for service in (SLEEPER, LLAMA):
        with pytest.raises(SystemExit) as exited:
            simulate(capsys, service, steady_trace(tmp_path), "--compress", value)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "argument --compress: " in err and value in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--warmup", "-10"), ("--tokens-per-item", "-3"), ("--tokens-per-item", "1.5")],
)
def test_negative_or_fractional_counts_are_refused_by_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    with pytest.raises(SystemExit):
        simulate(capsys, SLEEPER, steady_trace(tmp_path), flag, value)
    assert f"argument {flag}: " in capsys.readouterr().err


def test_a_bench_refuses_zero_seeds() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "autoscaling.py"), "--seeds", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "argument --seeds: must be at least 1" in done.stderr, done.stderr


@pytest.mark.parametrize("service", [SLEEPER, LLAMA])
def test_a_plot_folder_that_does_not_exist_is_named_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], service: Path
) -> None:
    plot = tmp_path / "missing" / "out.png"
    code, out, err = simulate(capsys, service, steady_trace(tmp_path), "--plot", str(plot))
    assert code == 1 and f"--plot {plot}: No such file or directory" in err, err
    assert "Traceback" not in err and "attainment" not in out  # nothing was simulated


def test_a_plot_without_a_suffix_is_written_as_the_png_the_output_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = simulate(
        capsys, SLEEPER, steady_trace(tmp_path), "--warmup", "0", "--plot", str(tmp_path / "noext")
    )
    written = tmp_path / "noext.png"
    assert code == 0 and f"plot: {written}" in out, out
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = simulate(
        capsys, SLEEPER, steady_trace(tmp_path), "--plot", str(tmp_path / "p.txt")
    )
    assert code == 1 and ".txt is not a format written" in err


def test_defaults_standing_in_for_the_models_times_are_said_and_a_bad_one_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = simulate(capsys, RESNET, steady_trace(tmp_path), "--warmup", "0")
    assert code == 0 and "built-in defaults" in out and "ServiceTimes document" in out, out
    code, out, _ = simulate(capsys, SLEEPER, steady_trace(tmp_path), "--warmup", "0")
    assert code == 0 and "the model's parameters exec_time_ms, per_item_ms" in out, out
    bad = tmp_path / "bad.yaml"
    bad.write_text(SLEEPER.read_text().replace('exec_time_ms: "5"', 'exec_time_ms: "5 ms"'))
    code, _, err = simulate(capsys, bad, steady_trace(tmp_path))
    assert code == 1 and "model.parameters.exec_time_ms: '5 ms'" in err, err


def test_a_file_with_several_services_needs_a_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = tmp_path / "two.yaml"
    other = SLEEPER.read_text().replace("name: sleeper-chat", "name: sleeper-two", 1)
    two.write_text(SLEEPER.read_text() + "\n---\n" + other)
    code, _, err = simulate(capsys, two, steady_trace(tmp_path))
    assert code == 1 and "2 InferenceServices" in err and "--name" in err, err
    code, out, _ = simulate(
        capsys, two, steady_trace(tmp_path), "--name", "sleeper-two", "--warmup", "0"
    )
    assert code == 0 and out.startswith("service times") and "sleeper-two: policy" in out


def test_prefix_routing_on_a_request_level_service_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = simulate(capsys, SLEEPER, steady_trace(tmp_path), "--routing", "prefix")
    assert code == 1 and "--routing prefix: LLM services only" in err, err


def test_an_empty_metadata_is_named_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    classes = tmp_path / "classes.yaml"
    classes.write_text("kind: AcceleratorClass\nmetadata:\nspec: {gpuProduct: NVIDIA-L4}\n")
    code = main(
        [
            "simulate",
            "-f",
            str(SLEEPER),
            "--classes",
            str(classes),
            "--trace",
            str(steady_trace(tmp_path)),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1 and f"{classes}#1 (AcceleratorClass ?)" in err and "name" in err, err
    assert "Traceback" not in err


def test_a_request_level_service_reads_a_mooncake_trace_whatever_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Told apart by the first line, not the file's name: a Mooncake trace saved as .json
    # (it ended in "Invalid isoformat string" before).
    lines = (ROOT / "traces" / "mooncake-conversation-2025.jsonl").read_text().splitlines()
    trace = tmp_path / "slice.json"
    trace.write_text("\n".join(lines[:60]) + "\n")
    code, out, err = simulate(capsys, SLEEPER, trace, "--warmup", "0")
    assert code == 0, err
    assert "(60 requests over" in out, out


def test_a_malformed_trace_row_is_named_by_its_line_on_the_request_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = steady_trace(tmp_path)
    trace.write_text(trace.read_text() + "12.5,many,10\n")
    code, _, err = simulate(capsys, SLEEPER, trace)
    assert code == 1 and f"{trace}: line 42: ContextTokens: 'many'" in err, err


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("5", 0.005),
        ("0", 0.0),
        ("5 ms", DEFAULT_TIME_PER_BATCH_S),
        ("nan", DEFAULT_TIME_PER_BATCH_S),
    ],
)
def test_the_operator_reads_a_stated_time_and_falls_back_on_a_malformed_one(
    given: str, seconds: float
) -> None:
    # The operator corrects the prior from Triton's measurements, so a malformed value
    # falls back to the default there; 0 is a cost the model does not have, and stands.
    spec = parse_inference_service(yaml.safe_load(SLEEPER.read_text())).spec
    params = {**spec.model.parameters, "exec_time_ms": given}
    stated = spec.model_copy(update={"model": spec.model.model_copy(update={"parameters": params})})
    assert service_profile(stated).time_per_batch == pytest.approx(seconds)


def test_a_mooncake_trace_on_epoch_milliseconds_starts_at_its_earliest_row_on_both_paths() -> None:
    lines = [
        '{"timestamp": 1700000002500, "input_length": 10, "output_length": 2}',
        '{"timestamp": 1700000000000, "input_length": 20, "output_length": 3}',
    ]
    assert [r.at for r in parse_trace(lines)] == [0.0, 2.5]
    assert [(r.arrival_s, r.prompt_tokens) for r in mooncake(lines).requests] == [
        (0.0, 20),
        (2.5, 10),
    ]
    # A byte-order mark ahead of the first line is no content.
    assert len(parse_trace(["\ufeff" + lines[0]])) == 1


def _no_warmup(service: Path) -> tuple[str, ...]:
    """No warm-up for a request-level service; an LLM service's replay has none to skip."""
    return () if service == LLAMA else ("--warmup", "0")


@pytest.mark.parametrize("service", [SLEEPER, LLAMA])
def test_a_trace_saved_as_utf16_reads_as_its_utf8_copy_and_a_plot_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], service: Path
) -> None:
    # A spreadsheet's "Unicode text" is UTF-16 with a byte-order mark.
    utf8 = steady_trace(tmp_path)
    utf16 = tmp_path / "t16.csv"
    utf16.write_text(utf8.read_text(), encoding="utf-16")
    code8, out8, _ = simulate(capsys, service, utf8, *_no_warmup(service))
    code16, out16, err = simulate(capsys, service, utf16, *_no_warmup(service))
    assert code8 == code16 == 0, err

    def figures(out: str) -> list[str]:  # every line but the wall-clock times
        return [line for line in out.replace("t16", "t").splitlines() if "simulated in" not in line]

    assert figures(out16) == figures(out8)
    latin = tmp_path / "latin.csv"
    latin.write_bytes(utf8.read_bytes().replace(b"100,10", "100,10\u00e9".encode("latin-1"), 1))
    code, _, err = simulate(capsys, service, latin)
    assert code == 1 and "not UTF-8 text" in err and "save the trace as UTF-8" in err, err
    code, _, err = simulate(capsys, service, utf8, "--plot", str(tmp_path))
    assert code == 1 and f"--plot {tmp_path}: a folder" in err, err


@pytest.mark.parametrize("service", [SLEEPER, LLAMA])
def test_a_quiet_spell_over_most_of_the_trace_is_pointed_out_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], service: Path
) -> None:
    trace = tmp_path / "day.csv"
    rows = [f"2024-05-10 00:00:{k:02d},100,10" for k in range(40)]
    rows[7] = "2024-05-09 23:00:07,100,10"  # one row an hour early: a mistyped hour
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    code, out, _ = simulate(capsys, service, trace, *_no_warmup(service))
    assert code == 0
    assert out.startswith(
        "note: no request arrives for 3593s, from 0s into the trace (99% of its 3632s)"
    ), out
    code, out, _ = simulate(capsys, service, steady_trace(tmp_path), *_no_warmup(service))
    assert code == 0 and "note:" not in out


def test_a_file_without_a_service_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = steady_trace(tmp_path)
    code = main(["simulate", "-f", str(trace), "--trace", str(trace)])
    assert code == 1 and f"{trace}: no InferenceService found" in capsys.readouterr().err


def test_a_request_level_service_is_simulated_on_the_classes_placement_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # fp8 needs compute capability 8.9: placement skips the A100 slice, and so does the
    # simulation; with no class left it stops naming why.
    fp8 = tmp_path / "fp8.yaml"
    fp8.write_text(SLEEPER.read_text().replace("precision: fp16", "precision: fp8"))
    code, out, err = simulate(capsys, fp8, steady_trace(tmp_path), "--warmup", "0")
    assert code == 0, err
    assert "class h100:" in out and "class l4:" in out and "class a100-3g40gb:" not in out
    assert "placement skips: precision fp8 needs a newer GPU than AcceleratorClass " in out
    only_a100 = tmp_path / "a100.yaml"
    only_a100.write_text(
        fp8.read_text().replace("classes: [h100, a100-3g40gb, l4]", "classes: [a100-3g40gb]")
    )
    code, _, err = simulate(capsys, only_a100, steady_trace(tmp_path))
    assert code == 1 and "accelerators.classes: no class can run the service (" in err, err


def test_trace_text_in_other_encodings_is_read_or_refused_saying_how_to_fix_it(
    tmp_path: Path,
) -> None:
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,100,10\n"
    for encoding in ("utf-8", "utf-8-sig", "utf-16", "utf-32"):  # the last three with a mark
        path = tmp_path / f"{encoding}.csv"
        path.write_text(text, encoding=encoding)
        assert trace_lines(path) == text.splitlines(), encoding
    bare = tmp_path / "utf-16-le.csv"  # UTF-16 without a byte-order mark: NUL bytes
    bare.write_bytes(text.encode("utf-16-le"))
    with pytest.raises(ValueError, match=r"NUL bytes.*save the trace as UTF-8"):
        trace_lines(bare)


def test_a_quiet_spell_is_found_in_arrivals_in_any_order() -> None:
    assert quiet_note([0.0, 1.0, 2.0, 100.0]) is not None
    assert quiet_note([100.0, 0.0, 2.0, 1.0]) == quiet_note([0.0, 1.0, 2.0, 100.0])
    assert quiet_note([0.0, 40.0, 60.0, 100.0]) is None  # 40 % of the span: no note
    assert quiet_note([5.0]) is None and quiet_note([3.0, 3.0]) is None
    # Under a minute, or between two arrivals only: nothing to say.
    assert quiet_note([0.0, 0.1, 0.2, 0.9]) is None and quiet_note([0.0, 500.0]) is None
