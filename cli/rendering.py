"""`gpuserve render`: the children the operator would create, with no cluster needed.

It runs the same code path as the controller: parse with gpuserve.api, place replicas
with gpuserve.placement (assuming every class has room), render with gpuserve.resources.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cli.errors import CLIError
from gpuserve.api.models import (
    AcceleratorClass,
    AcceleratorClassSpec,
    InferenceService,
    parse_accelerator_class,
    parse_inference_service,
)
from gpuserve.placement.planning import ClassCapacity, plan_pools, usable_classes
from gpuserve.resources.rendering import RenderInput, pool_plans, render_children


class RenderError(CLIError):
    """A manifest that cannot be rendered; the message names the document and field."""


def load_documents(paths: list[Path]) -> list[tuple[str, dict[str, Any]]]:
    docs: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for file in files:
            try:
                loaded = list(yaml.safe_load_all(file.read_text()))
            except (OSError, yaml.YAMLError) as exc:
                raise RenderError(f"{file}: {exc}") from exc
            for i, doc in enumerate(loaded):
                if isinstance(doc, dict):
                    docs.append((f"{file}#{i + 1}", doc))
    return docs


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
    )


def split_manifests(
    docs: list[tuple[str, dict[str, Any]]],
) -> tuple[list[InferenceService], dict[str, AcceleratorClassSpec]]:
    services: list[InferenceService] = []
    classes: dict[str, AcceleratorClassSpec] = {}
    for where, doc in docs:
        kind = doc.get("kind")
        try:
            if kind == "InferenceService":
                services.append(parse_inference_service(_with_namespace(doc, where)))
            elif kind == "AcceleratorClass":
                accel: AcceleratorClass = parse_accelerator_class(doc)
                classes[accel.metadata.name] = accel.spec
        except ValidationError as exc:
            name = _metadata(doc, where).get("name", "?")
            raise RenderError(f"{where} ({kind} {name}): {_describe(exc)}") from exc
    return services, classes


def _with_namespace(doc: dict[str, Any], where: str) -> dict[str, Any]:
    meta = {"namespace": "default", **_metadata(doc, where)}
    return {**doc, "metadata": meta}


def _metadata(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """The document's metadata; an empty ``metadata:`` is none (the schema then names the
    missing name), anything but a mapping an error naming it."""
    meta = doc.get("metadata")
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise RenderError(f"{where} ({doc.get('kind')}): metadata: not a mapping")
    return meta


def render_service(
    svc: InferenceService, classes: dict[str, AcceleratorClassSpec]
) -> list[dict[str, Any]]:
    order, issues = usable_classes(svc.spec, classes)
    if not order:
        raise RenderError(
            f"InferenceService {svc.metadata.name}: " + "; ".join(i.message for i in issues)
        )
    room = {c: ClassCapacity(free=10**6, total=10**6) for c in order}
    plan = plan_pools(
        desired=svc.spec.scaling.min_replicas,
        warm_pool=svc.spec.scaling.warm_pool,
        order=order,
        serving_now={},
        standby_now={},
        standby_serving={},
        capacity=room,
    )
    pools = pool_plans(plan, order)
    for issue in issues:
        # The operator renders the rest too, and says so in Schedulable; a typo'd class
        # name must not vanish from a render without a word.
        print(
            f"gpuserve render: note: InferenceService {svc.metadata.name}: {issue.message}: "
            "no pool rendered for it",
            file=sys.stderr,
        )
    # As the operator does: pools only for the classes that can run this spec.
    usable = {c: classes[c] for c in order}
    return render_children(RenderInput(service=svc, classes=usable, pools=pools))


def run(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.filename]
    if args.classes:
        paths += [Path(p) for p in args.classes]
    services, classes = split_manifests(load_documents(paths))
    if not services:
        raise RenderError("no InferenceService found in the given files")
    out: list[dict[str, Any]] = []
    for svc in services:
        out.extend(render_service(svc, classes))
    sys.stdout.write(yaml.dump_all(out, Dumper=_BlockDumper, sort_keys=False, width=100))
    return 0


class _BlockDumper(yaml.SafeDumper):
    """Safe YAML with multi-line strings (config.pbtxt) as literal blocks, to read as
    the files they are rather than one escaped line."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "render",
        help="print the objects the operator would create for a manifest (no cluster needed)",
        description=__doc__,
    )
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        help="manifest file or directory (repeatable)",
    )
    p.add_argument(
        "--classes",
        action="extend",
        nargs="+",
        default=[],
        metavar="FILE",
        help="file(s) with the AcceleratorClasses the services refer to (repeatable)",
    )
    p.set_defaults(func=run)
