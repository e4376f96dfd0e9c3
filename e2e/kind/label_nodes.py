"""Gives the workers of a kind cluster the GPU identity of the simulated nodes.

Worker i (sorted by name) becomes simulated node i of e2e/nodepools.yaml: the same GPU
Feature Discovery labels, the nvidia.com/gpu taint, and the device plugin's extended
resources (patched into node status, which a kubelet keeps for resources it doesn't manage).
cpu/memory/pods stay what the kubelet reports, and kubelet-owned labels are left alone.

Usage: python e2e/kind/label_nodes.py --kubeconfig PATH [--dry-run]
Not exercised in this repository's CI (it needs Docker for kind).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from e2e.cluster import nodepools, settings

# Labels the kubelet owns, and KWOK's markers (a real kubelet runs these nodes).
SKIPPED_LABELS = {"kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "type"}
KUBECTL_TIMEOUT_S = 60.0


def kubectl(kubeconfig: str, *args: str, dry_run: bool = False) -> str:
    argv = ["kubectl", f"--kubeconfig={kubeconfig}", *args]
    if dry_run and args[0] != "get":
        print(" ".join(argv))
        return ""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout


def worker_names(kubeconfig: str) -> list[str]:
    nodes = json.loads(kubectl(kubeconfig, "get", "nodes", "-o", "json"))["items"]
    workers = [n["metadata"]["name"] for n in nodes
               if "node-role.kubernetes.io/control-plane" not in n["metadata"].get("labels", {})]
    return sorted(workers)


def apply(kubeconfig: str, worker: str, simulated: dict[str, Any], dry_run: bool) -> None:
    labels = {k: v for k, v in simulated["metadata"]["labels"].items()
              if k not in SKIPPED_LABELS}
    kubectl(kubeconfig, "label", "node", worker, "--overwrite",
            *[f"{k}={v}" for k, v in labels.items()], dry_run=dry_run)
    for taint in simulated.get("spec", {}).get("taints", []):
        value = f"={taint['value']}" if taint.get("value") else ""
        kubectl(kubeconfig, "taint", "node", worker, "--overwrite",
                f"{taint['key']}{value}:{taint['effect']}", dry_run=dry_run)
    extended = {k: v for k, v in simulated["status"]["capacity"].items()
                if k.startswith("nvidia.com/")}
    if extended:
        patch = {"status": {"capacity": extended, "allocatable": extended}}
        kubectl(kubeconfig, "patch", "node", worker, "--subresource=status", "--type=merge",
                "-p", json.dumps(patch), dry_run=dry_run)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--dry-run", action="store_true", help="print the kubectl commands")
    args = parser.parse_args()
    simulated = nodepools.node_manifests(nodepools.load(settings.nodepools_path()))
    workers = worker_names(args.kubeconfig)
    if len(workers) < len(simulated):
        raise SystemExit(f"{len(simulated)} simulated nodes but only {len(workers)} kind "
                         "workers; add workers to e2e/kind/kind-config.yaml")
    for worker, node in zip(workers, simulated, strict=False):
        apply(args.kubeconfig, worker, node, args.dry_run)
        print(f"{worker} -> {node['metadata']['name']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
