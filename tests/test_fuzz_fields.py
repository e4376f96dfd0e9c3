"""The fuzz test's field table follows the schema the models generate (e2e/fuzz_fields.py):
a new field is fuzzed or excluded with a reason, never silently left out."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from e2e.fuzz_fields import (
    CLASS,
    EXCLUDED,
    SERVICE,
    base_body,
    fuzz_table,
    lookup,
    mutate,
    schema_fields,
    spec_schema,
    stale_entries,
    unfuzzed,
)

KINDS = [SERVICE, CLASS]


@pytest.mark.parametrize("kind", KINDS)
def test_every_schema_field_is_fuzzed_or_excluded_with_a_reason(kind: str) -> None:
    missing = unfuzzed(kind)
    assert not missing, (
        f"{kind} fields the fuzz test does not mutate: {missing}. Teach "
        "e2e/fuzz_fields.limit_values their schema shape, give them near values, or list "
        "them in EXCLUDED with the reason."
    )


@pytest.mark.parametrize("kind", KINDS)
def test_hand_kept_entries_name_fields_the_schema_has(kind: str) -> None:
    assert stale_entries(kind) == []


@pytest.mark.parametrize("kind", KINDS)
def test_each_fuzzed_field_is_reached_by_a_mutation_of_the_base_body(kind: str) -> None:
    unreached: dict[str, str] = {}
    for path in fuzz_table(kind):
        body = base_body(kind, "probe")
        marker = f"the probe of {path}"  # mutate copies values: compared by equality
        mutate(body, path, "set", marker)
        try:
            if lookup(body, path) != marker:
                unreached[path] = "another value there"
        except (KeyError, IndexError, TypeError) as exc:
            unreached[path] = f"no such place ({exc!r})"
    assert not unreached, unreached


def _with_scaling_field(name: str, node: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(spec_schema(SERVICE))
    schema["properties"]["scaling"]["properties"][name] = node
    return schema


def test_a_field_added_to_the_schema_is_fuzzed_at_its_limits() -> None:
    schema = _with_scaling_field("probeKnob", {"type": "integer", "minimum": 2, "maximum": 9})
    values = fuzz_table(SERVICE, schema)["spec.scaling.probeKnob"]
    assert {1, 2, 9, 10} <= set(values)
    assert "spec.scaling.probeKnob" not in fuzz_table(SERVICE)


def test_a_field_of_a_shape_the_table_cannot_read_is_reported() -> None:
    schema = _with_scaling_field("oddKnob", {"x-kubernetes-int-or-string": True})
    assert unfuzzed(SERVICE, schema) == ["spec.scaling.oddKnob"]


def test_an_exclusion_needs_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = _with_scaling_field("oddKnob", {"x-kubernetes-int-or-string": True})
    monkeypatch.setitem(EXCLUDED, SERVICE, {"spec.scaling.oddKnob": " "})
    assert unfuzzed(SERVICE, schema) == ["spec.scaling.oddKnob"]
    monkeypatch.setitem(EXCLUDED, SERVICE, {"spec.scaling.oddKnob": "free-form by design"})
    assert unfuzzed(SERVICE, schema) == []


def test_an_excluded_field_is_not_fuzzed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "spec.tier" in fuzz_table(SERVICE)
    monkeypatch.setitem(EXCLUDED, SERVICE, {"spec.tier": "probe"})
    assert "spec.tier" not in fuzz_table(SERVICE)


def test_fields_under_lists_are_part_of_the_table() -> None:
    fields = schema_fields(spec_schema(SERVICE))
    table = fuzz_table(SERVICE)
    nested = [p for p in fields if "[0]." in p]
    assert nested, "the schema has no fields inside list items any more"
    assert set(nested) <= set(table)


def test_a_value_given_to_two_mutations_is_copied_so_the_body_never_refers_to_itself() -> None:
    # A strategy can hand one object to several mutations: set a field to it, then add
    # an unknown field into that field with the same object (found by the e2e fuzzer).
    body = base_body(CLASS, "fz-shared")
    shared: dict[str, Any] = {}
    mutate(body, "spec", "set", shared)
    mutate(body, "spec", "unknown", shared)
    assert body["spec"] == {"fuzzUnknownField": {}}
    assert shared == {}  # the strategy's object is left as it was
    json.dumps(body)  # no cycle
