"""Local Kubernetes control plane with simulated GPU node pools.

Real etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as loopback
processes; KWOK plays the kubelets of the fake GPU nodes described in e2e/nodepools.yaml.
Entry point: ``python -m e2e.cluster build|up|down|status``.
"""
