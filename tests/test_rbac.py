"""The chart's RBAC grants exactly what the operator's code needs.

The needed (group, resource, verb) set is derived from the code, not kept by hand:
- kopf decorators in controllers/ (AST, arguments evaluated in the module's namespace):
  every watched or indexed kind needs list+watch; change handlers write progress into
  status (patch on /status); timers and daemons make kopf put a finalizer on the object
  (patch); any handler may make kopf post an event (create);
- Kubernetes client calls: only controllers/kube.py may call the client (checked); each of
  its functions' verbs is read from the calls in its body (typed `*_namespaced_*` methods,
  custom-object methods, dynamic-client verbs), and each call site elsewhere says which
  resource it touches (a literal, a module constant, or the objects a known producer
  renders, e.g. `render_children` for every example service);
- kopf's own machinery (CRD discovery, namespace observation, peering), cross-checked
  against kopf's reference table of the resources it uses.

An unknown client method, a new kube.py function without a resource binding, or a call
site whose resource can't be resolved fails the test: the new code must be described
here, and the chart's role then has to grant it. Then the rendered chart's roles are
compared with the needed set in both directions (missing verbs, and verbs nobody needs),
for cluster-wide and per-namespace installs, with and without HA.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.rendering import load_documents, split_manifests
from gpuserve.api.models import API_VERSION, GROUP
from gpuserve.resources.naming import CLASSES_PLURAL, SERVICES_PLURAL
from gpuserve.resources.rendering import PoolPlan, RenderInput, render_children

REPO = Path(__file__).resolve().parents[1]
CONTROLLERS = REPO / "controllers"
CHART = REPO / "charts" / "gpuserve"
KUBE_VERSION = "1.34.4"  # helm template's default capabilities are older than kubeVersion

Need = tuple[str, str, str]  # (API group, resource[/subresource], verb)


class ScanError(AssertionError):
    """Code the scanner can't map to permissions: describe it in this file first."""


# ----------------------------------------------------------------------------- mappings
# Typed client classes -> API group. A class not listed fails the scan.
API_CLASS_GROUPS = {
    "CoreV1Api": "",
    "AppsV1Api": "apps",
    "PolicyV1Api": "policy",
    "SchedulingV1Api": "scheduling.k8s.io",
    "CoordinationV1Api": "coordination.k8s.io",
    "CustomObjectsApi": None,  # group and plural come from the call site
}
# Typed method verb prefixes -> RBAC verb.
TYPED_VERBS = {
    "read": "get",
    "get": "get",  # CustomObjectsApi says get_..., the typed clients read_...
    "list": "list",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete_collection": "deletecollection",
    "delete": "delete",
}
TYPED_METHOD = re.compile(
    r"^(?P<verb>read|get|list|create|patch|replace|delete_collection|delete)_"
    r"(?:namespaced_|cluster_)?(?P<what>[a-z_]+?)(?P<sub>_status|_scale)?"
    r"(?:_for_all_namespaces)?$"
)
# DynamicClient methods -> RBAC verbs. A server-side apply is a PATCH; the API server also
# authorizes it as `create` when the object does not exist yet (seen on the real cluster).
DYNAMIC_VERBS = {
    "server_side_apply": {"patch", "create"},
    "get": {"get"},
    "patch": {"patch"},
    "create": {"create"},
    "replace": {"update"},
    "delete": {"delete"},
    "watch": {"list", "watch"},
}
# kube.py helpers that only build clients, and the names under which they are reached.
CLIENT_FACTORIES = {"api_client", "dynamic", "_resource"}
# How each public kube.py function learns its resource (the verbs come from its body):
#   object  - the kind of the object passed as first argument
#   kind    - (api_version, kind) positional arguments
#   plural  - `plural` (keyword or 1st argument) of gpuserve.io, the status subresource
#             for the *_status functions
#   static  - fixed
#   discovery - none: asks API discovery only (which every authenticated user may read)
BINDINGS: dict[str, tuple[str, str | None]] = {
    "serves": ("discovery", None),
    "apply_if_changed": ("object", None),
    "get": ("kind", None),
    "patch_status": ("plural", "status"),
    "get_custom": ("plural", None),
    "patch_pod_metadata": ("static", "pods"),
    "delete_deployment": ("static", "deployments"),
    "delete": ("kind", None),
}
# Producers of the objects passed to kube.apply_if_changed, per calling function.
APPLY_SOURCES: dict[tuple[str, str], str] = {
    ("controllers.converging", "_apply"): "children",
    ("controllers.startup", "configure"): "priority_classes",
}
KIND_RESOURCES = {
    ("v1", "ConfigMap"): ("", "configmaps"),
    ("v1", "Service"): ("", "services"),
    ("v1", "Pod"): ("", "pods"),
    ("apps/v1", "Deployment"): ("apps", "deployments"),
    ("policy/v1", "PodDisruptionBudget"): ("policy", "poddisruptionbudgets"),
    ("scheduling.k8s.io/v1", "PriorityClass"): ("scheduling.k8s.io", "priorityclasses"),
    ("keda.sh/v1alpha1", "ScaledObject"): ("keda.sh", "scaledobjects"),
    ("inference.networking.k8s.io/v1", "InferencePool"): (
        "inference.networking.k8s.io",
        "inferencepools",
    ),
    (API_VERSION, "InferenceService"): (GROUP, SERVICES_PLURAL),
    ("kopf.dev/v1", "ClusterKopfPeering"): ("kopf.dev", "clusterkopfpeerings"),
    ("kopf.dev/v1", "KopfPeering"): ("kopf.dev", "kopfpeerings"),
}
# Cluster-scoped resources (gpuserve's own come from the CRDs' spec.scope).
CLUSTER_SCOPED_BUILTIN = {
    ("", "nodes"),
    ("", "namespaces"),
    ("scheduling.k8s.io", "priorityclasses"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("kopf.dev", "clusterkopfpeerings"),
}
KOPF_RESOURCE_DECORATORS = {
    "kopf.index": "watch",
    "kopf.on.event": "watch",
    "kopf.on.create": "change",
    "kopf.on.update": "change",
    "kopf.on.resume": "change",
    "kopf.on.field": "change",
    "kopf.on.delete": "finalize",
    "kopf.timer": "spawn",
    "kopf.daemon": "spawn",
}
KOPF_OTHER_DECORATORS = {"kopf.on.startup", "kopf.on.cleanup", "kopf.on.login", "kopf.on.probe"}
KOPF_EVENT_CALLS = {"kopf.event", "kopf.info", "kopf.warn", "kopf.exception"}
EVENTS: Need = ("", "events", "create")


@dataclass(frozen=True)
class Mode:
    """One way to install the chart."""

    name: str
    namespaces: tuple[str, ...] = ()
    ha: bool = False

    def helm_args(self) -> list[str]:
        args = ["--set", f"replicaCount={2 if self.ha else 1}"]
        for i, ns in enumerate(self.namespaces):
            args += ["--set", f"watchNamespaces[{i}]={ns}"]
        return args


MODES = [
    Mode("cluster-wide"),
    Mode("namespaced", ("ml", "web")),
    Mode("cluster-wide-ha", ha=True),
    Mode("namespaced-ha", ("ml", "web"), ha=True),
]
RELEASE_NAMESPACE = "gpuserve-system"


# ----------------------------------------------------------------------------- scanning
@dataclass
class Module:
    name: str
    tree: ast.Module
    namespace: dict[str, Any]  # module globals, to evaluate decorator / call arguments
    path: str


@functools.cache
def load_modules() -> list[Module]:
    modules = []
    for path in sorted(CONTROLLERS.glob("*.py")):
        name = f"controllers.{path.stem}"
        mod = importlib.import_module(name)
        modules.append(
            Module(name, ast.parse(path.read_text()), vars(mod), str(path.relative_to(REPO)))
        )
    return modules


def dotted(node: ast.AST) -> str:
    return ast.unparse(node)


def evaluate(nodes: list[ast.expr], namespace: dict[str, Any], where: str) -> tuple[Any, ...]:
    """Evaluates argument expressions (with *unpacking) in the module's namespace."""
    expr = ast.Expression(ast.Tuple(elts=nodes, ctx=ast.Load()))
    ast.fix_missing_locations(expr)
    try:
        value: tuple[Any, ...] = eval(compile(expr, where, "eval"), dict(namespace))
    except Exception as exc:  # any unresolvable expression is a scan failure
        raise ScanError(f"{where}: cannot resolve {ast.unparse(expr.body)}: {exc}") from exc
    return value


def kopf_resource(call: ast.Call, module: Module, where: str) -> tuple[str, str]:
    """(group, plural) of a kopf decorator call: positional or group/version/plural kwargs."""
    args = evaluate(list(call.args), module.namespace, where)
    kw = {k.arg: evaluate([k.value], module.namespace, where)[0] for k in call.keywords if k.arg}
    if len(args) == 3:
        group, _, plural = args
    elif len(args) == 2:
        group_version, plural = args
        group = group_version.rpartition("/")[0]
    elif "plural" in kw:
        group, plural = kw.get("group", ""), kw["plural"]
    else:
        raise ScanError(f"{where}: spell out group, version and plural in {ast.unparse(call)}")
    return str(group), str(plural)


def kopf_needs(module: Module) -> tuple[set[Need], set[tuple[str, str]]]:
    """Needs from kopf decorators and event calls; also the (group, plural)s handled."""
    needs: set[Need] = set()
    handled: set[tuple[str, str]] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Call) and dotted(node.func) in KOPF_EVENT_CALLS:
            needs.add(EVENTS)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            name = dotted(deco.func if isinstance(deco, ast.Call) else deco)
            if name in KOPF_OTHER_DECORATORS or not name.startswith("kopf."):
                continue
            role = KOPF_RESOURCE_DECORATORS.get(name)
            where = f"{module.path}:{deco.lineno}"
            if role is None or not isinstance(deco, ast.Call):
                raise ScanError(f"{where}: unknown kopf decorator {name}; describe it here")
            group, plural = kopf_resource(deco, module, where)
            handled.add((group, plural))
            needs |= {(group, plural, "list"), (group, plural, "watch")}
            if role in ("change", "finalize", "spawn"):
                needs.add(EVENTS)  # kopf reports handler failures as events
            if role == "change":  # progress and diff base live in status.kopf (startup.py)
                needs.add((group, f"{plural}/status", "patch"))
            # kopf adds and removes its finalizer; for served objects it also removes a
            # finalizer that an older operator version (with kopf timers) left behind.
            if role in ("change", "finalize", "spawn"):
                needs.add((group, plural, "patch"))
    return needs, handled


def _api_class(node: ast.AST) -> str | None:
    """`client.CoreV1Api(...)` -> "CoreV1Api"."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "client"
    ):
        return node.func.attr
    return None


def _plural_of(snake: str) -> str:
    word = snake.replace("_", "")
    return word + ("es" if word.endswith(("s", "ss")) else "s")


_UNKNOWN = object()  # a call-site argument whose value can't be known statically


def _truthy_guards(fn: ast.FunctionDef) -> dict[int, frozenset[str]]:
    """For each call in `fn`: the parameters that must be truthy for it to run (a parameter
    used bare in an enclosing `if` test, alone or as an operand of a top-level `and`)."""
    params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    guards: dict[int, frozenset[str]] = {}

    def visit(node: ast.AST, active: frozenset[str]) -> None:
        if isinstance(node, ast.If):
            test = node.test
            tests = (
                test.values
                if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)
                else [test]
            )
            names = {x.id for x in tests if isinstance(x, ast.Name) and x.id in params}
            visit(test, active)
            for child in node.body:
                visit(child, active | names)
            for child in node.orelse:
                visit(child, active)
            return
        if isinstance(node, ast.Call):
            guards[id(node)] = active
        for sub in ast.iter_child_nodes(node):
            visit(sub, active)

    for stmt in fn.body:
        visit(stmt, frozenset())
    return guards


def _defaults(fn: ast.FunctionDef) -> dict[str, Any]:
    out: dict[str, Any] = {}
    positional = fn.args.args[len(fn.args.args) - len(fn.args.defaults) :]
    pairs = [
        *zip(positional, fn.args.defaults, strict=True),
        *zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True),
    ]
    for arg, default in pairs:
        if default is not None:
            try:
                out[arg.arg] = ast.literal_eval(default)
            except ValueError:
                out[arg.arg] = _UNKNOWN
    return out


class KubeScan:
    """The client calls of each function in controllers/kube.py, keyed by resource.

    Keys: "group|plural[/sub]" for typed calls, "*" for the resource the call site supplies
    (dynamic / custom-object calls), "*/status" for its status subresource. A call into
    another kube.py function guarded by a flag parameter (`if live is None and fetch:`)
    counts only when the call site doesn't pass that flag as a false constant.
    """

    def __init__(self, tree: ast.Module, path: str) -> None:
        self.functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
        self.direct: dict[str, list[tuple[str, set[str], frozenset[str]]]] = {}
        self.calls: dict[str, list[tuple[str, frozenset[str]]]] = {}
        self.defaults = {name: _defaults(fn) for name, fn in self.functions.items()}
        for name, fn in self.functions.items():
            self._scan(name, fn, path)

    def _scan(self, name: str, fn: ast.FunctionDef, path: str) -> None:
        guards = _truthy_guards(fn)
        direct: list[tuple[str, set[str], frozenset[str]]] = []
        calls: list[tuple[str, frozenset[str]]] = []
        # `api = client.CustomObjectsApi(...)` then `api.patch_...(...)`: the local name
        # stands for its client class.
        local_clients = {
            node.targets[0].id: cls
            for node in ast.walk(fn)
            if isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and (cls := _api_class(node.value)) is not None
        }
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            guard = guards.get(id(node), frozenset())
            where = f"{path}:{node.lineno}"
            func = node.func
            if isinstance(func, ast.Name) and func.id in self.functions and func.id != name:
                calls.append((func.id, guard))
                continue
            if not isinstance(func, ast.Attribute):
                continue
            receiver = func.value
            api_class = _api_class(receiver)
            if api_class is None and isinstance(receiver, ast.Name):
                api_class = local_clients.get(receiver.id)
            if api_class is not None:
                if api_class not in API_CLASS_GROUPS:
                    raise ScanError(f"{where}: client.{api_class} is not mapped to an API group")
                match = TYPED_METHOD.match(func.attr)
                if match is None:
                    raise ScanError(f"{where}: unmapped client method {api_class}.{func.attr}")
                verb = TYPED_VERBS[match["verb"]]
                sub = (match["sub"] or "").lstrip("_")
                if API_CLASS_GROUPS[api_class] is None:
                    key = "*/" + sub if sub else "*"
                else:
                    plural = _plural_of(match["what"])
                    key = f"{API_CLASS_GROUPS[api_class]}|{plural}" + (f"/{sub}" if sub else "")
                direct.append((key, {verb}, guard))
                continue
            # Dynamic client: dynamic().server_side_apply(...), _resource(...).get(...)
            inner = receiver.func if isinstance(receiver, ast.Call) else None
            if isinstance(inner, ast.Name) and inner.id in CLIENT_FACTORIES:
                verbs = DYNAMIC_VERBS.get(func.attr)
                if verbs is None:
                    raise ScanError(f"{where}: unmapped dynamic client method {func.attr}")
                direct.append(("*", set(verbs), guard))
        self.direct[name] = direct
        self.calls[name] = calls

    def _runs(self, name: str, guard: frozenset[str], bindings: dict[str, Any]) -> bool:
        for param in guard:
            value = bindings.get(param, self.defaults[name].get(param, _UNKNOWN))
            if value is not _UNKNOWN and not value:
                return False
        return True

    def verbs(
        self, name: str, bindings: dict[str, Any] | None = None, seen: frozenset[str] = frozenset()
    ) -> dict[str, set[str]]:
        """Verbs per key of a call to `name` with these constant keyword arguments."""
        bound = bindings or {}
        merged: dict[str, set[str]] = {}
        for key, verbs, guard in self.direct[name]:
            if self._runs(name, guard, bound):
                merged.setdefault(key, set()).update(verbs)
        for callee, guard in self.calls[name]:
            if callee not in seen and self._runs(name, guard, bound):
                for key, verbs in self.verbs(callee, None, seen | {name}).items():
                    merged.setdefault(key, set()).update(verbs)
        return merged


def kinds_to_needs(objs: Iterable[dict[str, Any]], verbs: set[str], where: str) -> set[Need]:
    needs: set[Need] = set()
    for obj in objs:
        key = (obj["apiVersion"], obj["kind"])
        if key not in KIND_RESOURCES:
            raise ScanError(f"{where}: applies a {key[1]} ({key[0]}): add it to KIND_RESOURCES")
        group, plural = KIND_RESOURCES[key]
        needs |= {(group, plural, v) for v in verbs}
    return needs


def example_children() -> list[dict[str, Any]]:
    """Children of every example service on every allowed class (all kinds it can render)."""
    paths = sorted((REPO / "examples").glob("*.yaml"))
    services, classes = split_manifests(load_documents(paths))
    out: list[dict[str, Any]] = []
    for svc in services:
        allowed = [c for c in svc.spec.accelerators.classes if c in classes]
        pools = {c: PoolPlan(replicas=1) for c in allowed}
        out.extend(render_children(RenderInput(service=svc, classes=classes, pools=pools)))
    assert out, "no example service rendered any child"
    return out


def apply_source_objects(source: str) -> list[dict[str, Any]]:
    if source == "children":
        return example_children()
    if source == "priority_classes":
        startup = importlib.import_module("controllers.startup")
        objs: list[dict[str, Any]] = startup.priority_classes()
        return objs
    raise ScanError(f"unknown apply source {source}")


def _enclosing_functions(tree: ast.Module) -> Iterator[tuple[str, ast.Call]]:
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    yield fn.name, node


def call_site_needs(
    module: Module,
    scan: KubeScan,
    group: str,
    sources: dict[tuple[str, str], str] = APPLY_SOURCES,
    objects: Callable[[str], list[dict[str, Any]]] = apply_source_objects,
) -> set[Need]:
    """Needs of the calls from `module` into kube.py, and a check that nothing else calls
    the Kubernetes client directly."""
    needs: set[Need] = set()
    for fn_name, call in _enclosing_functions(module.tree):
        where = f"{module.path}:{call.lineno}"
        func = call.func
        if _api_class(func.value if isinstance(func, ast.Attribute) else func) or (
            isinstance(func, ast.Attribute)
            and _api_class(func) is None
            and dotted(func).startswith(("client.", "kubernetes.client"))
        ):
            raise ScanError(f"{where}: Kubernetes client used outside controllers/kube.py")
        if not (isinstance(func, ast.Attribute) and dotted(func.value) == "kube"):
            continue
        name = func.attr
        if name in CLIENT_FACTORIES:
            raise ScanError(f"{where}: kube.{name}() used directly; add a kube.py function")
        if name not in scan.functions:
            continue  # not a function (e.g. kube.WRITES)
        if name not in BINDINGS:
            raise ScanError(f"{where}: kube.{name} has no resource binding in BINDINGS")
        binding, extra = BINDINGS[name]
        flags: dict[str, Any] = {}
        for keyword in call.keywords:
            if keyword.arg:
                try:
                    flags[keyword.arg] = evaluate([keyword.value], module.namespace, where)[0]
                except ScanError:
                    flags[keyword.arg] = _UNKNOWN
        verbs_by_key = scan.verbs(name, flags)
        all_verbs = set().union(*verbs_by_key.values()) if verbs_by_key else set()
        if binding == "object":
            source = sources.get((module.name, fn_name))
            if source is None:
                raise ScanError(
                    f"{where}: kube.{name} called from {module.name}.{fn_name}; "
                    "say in APPLY_SOURCES what it applies"
                )
            needs |= kinds_to_needs(objects(source), all_verbs, where)
        elif binding == "kind":
            api_version, kind = evaluate(list(call.args[:2]), module.namespace, where)
            needs |= kinds_to_needs([{"apiVersion": api_version, "kind": kind}], all_verbs, where)
        elif binding == "plural":
            node = next((k.value for k in call.keywords if k.arg == "plural"), None)
            node = node if node is not None else (call.args[0] if call.args else None)
            if node is None:
                raise ScanError(f"{where}: kube.{name} without a plural")
            (plural,) = evaluate([node], module.namespace, where)
            for key, verbs in verbs_by_key.items():
                resource = plural + key[1:] if key.startswith("*") else key.split("|", 1)[1]
                needs |= {(group, resource, v) for v in verbs}
        elif binding == "discovery":
            if verbs_by_key:
                raise ScanError(f"{where}: kube.{name} is bound to discovery, calls {verbs_by_key}")
        elif binding == "static":
            for key, verbs in verbs_by_key.items():
                g, _, resource = key.partition("|")
                if key.startswith("*") or resource.split("/")[0] != extra:
                    raise ScanError(f"{where}: kube.{name} touches {key}, bound to {extra}")
                needs |= {(g, resource, v) for v in verbs}
    return needs


def kopf_framework_needs(namespaced: bool, ha: bool) -> set[Need]:
    """What kopf itself does besides the handlers (kopf/_core/reactor/observation.py,
    kopf/_core/engines/peering.py)."""
    needs: set[Need] = {
        ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    }
    if namespaced:  # kopf observes namespaces only when not cluster-wide
        needs |= {("", "namespaces", "list"), ("", "namespaces", "watch")}
    if ha:
        plural = "kopfpeerings" if namespaced else "clusterkopfpeerings"
        needs |= {("kopf.dev", plural, v) for v in ("list", "watch", "patch")}
        # gpuserve's periodic loops read the peering object to stand by like kopf does
        # (controllers/standby.py).
        needs.add(("kopf.dev", plural, "get"))
    return needs


def operator_needs(namespaced: bool = False, ha: bool = False) -> set[Need]:
    modules = load_modules()
    kube = next(m for m in modules if m.name == "controllers.kube")
    scan = KubeScan(kube.tree, kube.path)
    public = {n for n in scan.functions if not n.startswith("_") and n not in CLIENT_FACTORIES}
    unbound = {n for n in public if scan.verbs(n)} - set(BINDINGS)
    if unbound:
        raise ScanError(f"controllers/kube.py functions without a binding: {sorted(unbound)}")
    needs: set[Need] = set()
    for module in modules:
        kopf_part, _ = kopf_needs(module)
        needs |= kopf_part
        if module.name != "controllers.kube":
            needs |= call_site_needs(module, scan, GROUP)
    # Peering objects exist only with HA, and only the kind of the mode in use; the
    # framework needs below say which (the code names both kinds).
    needs = {n for n in needs if n[0] != "kopf.dev"}
    return needs | kopf_framework_needs(namespaced, ha)


# ----------------------------------------------------------------------------- the chart
@functools.cache
def crd_scopes() -> dict[tuple[str, str], str]:
    scopes = {}
    for path in (CHART / "crds").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                spec = doc["spec"]
                scopes[(spec["group"], spec["names"]["plural"])] = spec["scope"]
    return scopes


def cluster_scoped(need: Need) -> bool:
    group, resource, _ = need
    key = (group, resource.split("/")[0])
    return key in CLUSTER_SCOPED_BUILTIN or crd_scopes().get(key) == "Cluster"


def helm() -> str | None:
    try:
        from e2e.cluster import binaries

        path = binaries.HELM.path("helm")
        if path.is_file():
            return str(path)
    except ImportError:
        pass
    return shutil.which("helm")


needs_helm = pytest.mark.skipif(
    helm() is None, reason="helm is not built (python -m e2e.cluster build)"
)


def render(mode: Mode) -> list[dict[str, Any]]:
    binary = helm()
    assert binary is not None
    out = subprocess.run(
        [
            binary,
            "template",
            "gs",
            str(CHART),
            "--namespace",
            RELEASE_NAMESPACE,
            "--kube-version",
            KUBE_VERSION,
            *mode.helm_args(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def expand(rules: list[dict[str, Any]]) -> set[Need]:
    out: set[Need] = set()
    for rule in rules:
        assert not rule.get("resourceNames"), "resourceNames are not used"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    out.add((group, resource, verb))
    return out


def grants(docs: list[dict[str, Any]]) -> tuple[set[Need], dict[str, set[Need]]]:
    """Cluster-wide grants and per-namespace grants of the operator's ServiceAccount."""
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("ClusterRole", "Role")
    }
    cluster: set[Need] = set()
    per_ns: dict[str, set[Need]] = {}
    for b in docs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa for s in b["subjects"]):
            continue
        ns = b["metadata"].get("namespace")
        ref = b["roleRef"]
        role = roles[(ref["kind"], None if ref["kind"] == "ClusterRole" else ns, ref["name"])]
        rules = expand(role["rules"])
        if b["kind"] == "ClusterRoleBinding":
            cluster |= rules
        else:
            per_ns.setdefault(ns, set()).update(rules)
    return cluster, per_ns


def fmt(needs: Iterable[Need]) -> str:
    return ", ".join(f"{g or 'core'}/{r}:{v}" for g, r, v in sorted(needs))


# ----------------------------------------------------------------------------- tests
def test_derived_needs_cover_what_the_operator_is_known_to_do() -> None:
    needs = operator_needs()
    # Spot checks that the derivation sees each mechanism (not a copy of the chart).
    assert ("", "pods", "patch") in needs  # role labels (kube.patch_pod_metadata)
    assert ("apps", "deployments", "create") in needs  # server-side apply of a new child
    assert (GROUP, f"{SERVICES_PLURAL}/status", "patch") in needs
    assert (GROUP, CLASSES_PLURAL, "patch") in needs  # legacy finalizer removal
    assert ("scheduling.k8s.io", "priorityclasses", "get") in needs  # startup apply
    assert ("", "nodes", "watch") in needs
    assert EVENTS in needs
    # The only deletions: the pool Deployment of a class no longer listed or usable, and
    # the InferencePool of a service that is no longer an LLM service.
    deletions = {(g, r) for g, r, v in needs if v in ("delete", "deletecollection")}
    assert deletions == {("apps", "deployments"), ("inference.networking.k8s.io", "inferencepools")}
    assert not any(v == "update" for _, _, v in needs)


def test_kopf_still_uses_the_framework_resources_assumed_here() -> None:
    from kopf._cogs.structs import references as refs

    def named(selector: Any) -> tuple[str, str]:
        return selector.group, selector.plural or selector.any_name

    assert named(refs.CRDS) == ("apiextensions.k8s.io", "customresourcedefinitions")
    assert named(refs.NAMESPACES) == ("", "namespaces")
    assert named(refs.EVENTS) == ("", "events")
    assert named(refs.CLUSTER_PEERINGS_K) == ("kopf.dev", "clusterkopfpeerings")
    assert named(refs.NAMESPACED_PEERINGS_K) == ("kopf.dev", "kopfpeerings")


@needs_helm
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_chart_grants_exactly_what_the_code_needs(mode: Mode) -> None:
    needed = operator_needs(namespaced=bool(mode.namespaces), ha=mode.ha)
    cluster, per_ns = grants(render(mode))
    if not mode.namespaces:
        assert not per_ns, f"cluster-wide install has namespaced roles: {per_ns}"
        assert not (needed - cluster), f"role lacks: {fmt(needed - cluster)}"
        assert not (cluster - needed), f"role grants unneeded: {fmt(cluster - needed)}"
        return
    cluster_needed = {n for n in needed if cluster_scoped(n)}
    ns_needed = needed - cluster_needed
    assert cluster == cluster_needed, (
        f"ClusterRole lacks {fmt(cluster_needed - cluster)}; extra {fmt(cluster - cluster_needed)}"
    )
    for ns in mode.namespaces:
        got = per_ns.get(ns, set())
        assert got == ns_needed, (
            f"Role in {ns} lacks {fmt(ns_needed - got)}; extra {fmt(got - ns_needed)}"
        )
    # kopf posts events about cluster-scoped objects into the operator's own namespace.
    assert per_ns.get(RELEASE_NAMESPACE) == {EVENTS}
    assert set(per_ns) == {*mode.namespaces, RELEASE_NAMESPACE}


# --- the scanner catches new code ---------------------------------------------------------
def _module(source: str, name: str = "controllers.fake") -> Module:
    namespace: dict[str, Any] = {"GROUP": "gpuserve.io", "VERSION": "v1alpha1"}
    return Module(name, ast.parse(source), namespace, f"{name}.py")


def test_a_new_kopf_watch_shows_up_as_a_need() -> None:
    mod = _module(
        "import kopf\n"
        '@kopf.on.event("", "v1", "secrets")\n'
        "def on_secret(**_): pass\n"
        'SVC = (GROUP, VERSION, "inferenceservices")\n'
        "@kopf.daemon(*SVC)\n"
        "def watch_it(**_): pass\n"
    )
    mod.namespace["SVC"] = ("gpuserve.io", "v1alpha1", "inferenceservices")
    needs, _ = kopf_needs(mod)
    assert {("", "secrets", "list"), ("", "secrets", "watch")} <= needs
    assert ("gpuserve.io", "inferenceservices", "patch") in needs  # daemon -> finalizer


def test_a_new_client_call_in_kube_py_changes_the_derived_verbs() -> None:
    kube_src = (CONTROLLERS / "kube.py").read_text()
    added = kube_src + (
        "\n\ndef delete_pod(namespace: str, name: str) -> None:\n"
        "    client.CoreV1Api(api_client()).delete_namespaced_pod(name, namespace)\n"
    )
    scan = KubeScan(ast.parse(added), "controllers/kube.py")
    assert scan.verbs("delete_pod") == {"|pods": {"delete"}}
    # ... and since delete_pod has no binding, calling it from a controller fails the scan.
    caller = _module("from controllers import kube\ndef f():\n    kube.delete_pod('a', 'b')\n")
    with pytest.raises(ScanError, match="no resource binding"):
        call_site_needs(caller, scan, "gpuserve.io")


def test_unknown_client_methods_and_direct_client_use_fail_the_scan() -> None:
    odd = "def f():\n    client.CoreV1Api(api_client()).connect_get_namespaced_pod_exec('a', 'b')\n"
    with pytest.raises(ScanError, match="unmapped client method"):
        KubeScan(ast.parse(odd), "controllers/kube.py")
    direct = _module(
        "from kubernetes import client\ndef f():\n"
        "    client.CoreV1Api().list_namespaced_secret('x')\n"
    )
    with pytest.raises(ScanError, match=r"outside controllers/kube\.py"):
        call_site_needs(direct, KubeScan(ast.parse(""), "kube.py"), "gpuserve.io")


def test_a_new_apply_call_site_must_say_what_it_applies() -> None:
    kube_verbs = KubeScan(ast.parse((CONTROLLERS / "kube.py").read_text()), "kube.py")
    caller = _module("from controllers import kube\ndef g(obj):\n    kube.apply_if_changed(obj)\n")
    with pytest.raises(ScanError, match="APPLY_SOURCES"):
        call_site_needs(caller, kube_verbs, "gpuserve.io")
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
    with pytest.raises(ScanError, match="KIND_RESOURCES"):
        call_site_needs(
            caller,
            kube_verbs,
            "gpuserve.io",
            sources={("controllers.fake", "g"): "x"},
            objects=lambda _: [secret],
        )


def test_a_get_guarded_by_a_flag_counts_only_where_the_flag_is_not_false() -> None:
    scan = KubeScan(ast.parse((CONTROLLERS / "kube.py").read_text()), "kube.py")
    assert "get" in scan.verbs("apply_if_changed")["*"]  # fetch=True by default
    assert "get" not in scan.verbs("apply_if_changed", {"fetch": False})["*"]
    assert "get" in scan.verbs("apply_if_changed", {"fetch": _UNKNOWN})["*"]
    src = "from controllers import kube\ndef g(o):\n    kube.apply_if_changed(o, fetch={})\n"
    cm = [{"apiVersion": "v1", "kind": "ConfigMap"}]
    for flag, expected in (("False", False), ("True", True), ("o is None", True)):
        needs = call_site_needs(
            _module(src.format(flag)),
            scan,
            "gpuserve.io",
            sources={("controllers.fake", "g"): "x"},
            objects=lambda _: cm,
        )
        assert (("", "configmaps", "get") in needs) is expected, flag
