"""The ServiceTimes document (`gpuserve simulate --times`) is checked as strictly as the
manifests: a mistyped key is an error naming its path and the keys allowed there, and a
required key that is absent is said to be missing. The shipped example parses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from simulate_helpers import simulate

from gpuserve.sim.from_spec import parse_service_time_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "service-times.yaml"
SLEEPER = ROOT / "examples" / "sleeper-interactive.yaml"
TOP_KEYS = (
    "kind, timePerBatch, timePerItem, timePerRequest, jitter, precision, coldStart, "
    "warmStart, classes"
)
CLASS_KEYS = "timePerBatch, timePerItem, timePerRequest, jitter"


def _times(**extra: object) -> dict[str, object]:
    return {"kind": "ServiceTimes", "timePerBatch": "5ms", "timePerItem": "1ms", **extra}


@pytest.mark.parametrize("key", ["coldstart", "jiter", "cold_start", "apiVersion"])
def test_an_unknown_top_level_key_is_named_with_the_keys_allowed(key: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_service_time_model(_times(**{key: "10s"}))
    assert str(caught.value) == f"{key}: unknown field (expected one of: {TOP_KEYS})"


def test_an_unknown_key_in_a_class_entry_is_named_with_its_path() -> None:
    with pytest.raises(ValueError) as caught:
        parse_service_time_model(_times(classes={"l4": {"jitter": 0.1, "jiter": 0.3}}))
    assert str(caught.value) == f"classes.l4.jiter: unknown field (expected one of: {CLASS_KEYS})"


def test_a_misspelled_required_key_is_missing_and_unknown() -> None:
    body = _times()
    del body["timePerItem"]
    with pytest.raises(ValueError) as caught:
        parse_service_time_model({**body, "timePerIten": "1ms"})
    problems = str(caught.value).split("; ")
    assert "timePerItem: missing" in problems
    assert f"timePerIten: unknown field (expected one of: {TOP_KEYS})" in problems


def test_the_simulate_command_refuses_an_unknown_key_naming_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    times = tmp_path / "times.yaml"
    times.write_text("kind: ServiceTimes\ntimePerBatch: 5ms\ntimePerItem: 1ms\ncoldstart: 10s\n")
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n0.5,100,10\n")
    code, out, err = simulate(capsys, SLEEPER, trace, "--times", str(times))
    assert code != 0 and not out, out
    assert f"{times}#1 (ServiceTimes): coldstart: unknown field" in err, err


def test_the_shipped_example_parses_and_uses_every_field() -> None:
    (body,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    assert set(body) == set(TOP_KEYS.split(", "))
    assert set().union(*body["classes"].values()) == set(CLASS_KEYS.split(", "))
    times = parse_service_time_model(body)
    assert (times.per_batch, times.per_item) == pytest.approx((0.0056, 0.0002))
    assert (times.per_request, times.jitter_cv) == pytest.approx((0.00011, 0.03))
    assert (times.precision, times.cold_start, times.warm_start) == ("fp16", 45.0, 2.0)
    h100, mig = times.classes["h100"], times.classes["a100-3g40gb"]
    assert (h100.per_batch, h100.per_item) == pytest.approx((0.002, 0.00007))
    assert (h100.per_request, h100.jitter_cv) == (None, None)
    assert (mig.per_batch, mig.per_item) == (None, None)
    assert (mig.per_request, mig.jitter_cv) == pytest.approx((0.00015, 0.08))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timePerBatch", -1),
        ("timePerItem", float("nan")),
        ("coldStart", float("inf")),
        ("jitter", float("inf")),
    ],
)
def test_a_negative_or_infinite_number_is_refused_naming_the_field(
    field: str, value: float
) -> None:
    body: dict[str, Any] = {"kind": "ServiceTimes", "timePerBatch": "5ms", "timePerItem": "1ms"}
    body[field] = value
    with pytest.raises(ValueError, match=rf"{field}: expected a"):
        parse_service_time_model(body)
