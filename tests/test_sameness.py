from __future__ import annotations

from gpuserve.resources.sameness import contains, parse_quantity


def test_contains_ignores_server_defaults_but_not_changes() -> None:
    live = {
        "spec": {
            "replicas": 2,
            "progressDeadlineSeconds": 600,
            "template": {
                "spec": {
                    "containers": [{"name": "t", "image": "a", "terminationMessagePath": "/x"}]
                }
            },
        }
    }
    assert contains(
        live,
        {
            "spec": {
                "replicas": 2,
                "template": {"spec": {"containers": [{"name": "t", "image": "a"}]}},
            }
        },
    )
    assert not contains(live, {"spec": {"replicas": 3}})
    assert not contains(
        live, {"spec": {"template": {"spec": {"containers": [{"name": "t", "image": "b"}]}}}}
    )
    assert not contains(live, {"spec": {"template": {"spec": {"containers": []}}}})


def test_quantities_compare_by_value() -> None:
    assert contains({"cpu": "500m"}, {"cpu": "0.5"})
    assert contains({"memory": "8Gi"}, {"memory": str(8 << 30)})
    assert not contains({"cpu": "1"}, {"cpu": "2"})
    assert parse_quantity("1k") == 1000 and parse_quantity("abc") is None
