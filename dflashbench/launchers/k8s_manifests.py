"""The Kubernetes objects of one server, as plain dicts (pure: no client, no cluster).

- A server on one node: a **Job** (``backoffLimit: 0``, ``restartPolicy: Never``): a server that dies stays dead
  and says so, where a Deployment would restart it in the middle of a point and the sweep would measure a
  different server without knowing it.
- A server across nodes: a **LeaderWorkerSet** of one group (``size``: its nodes; kubernetes-sigs/lws v0.9.0's
  ``leaderworkerset.x-k8s.io/v1``), the leader's pod running node 0's command and every worker's the one follower
  template, with ``restartPolicy: None`` (no group recreated behind the sweep's back). LeaderWorkerSet puts
  ``LWS_LEADER_ADDRESS`` and ``LWS_WORKER_INDEX`` in every container's environment
  (kubernetes-sigs/lws@v0.9.0 api/leaderworkerset/v1/leaderworkerset_types.go), and Kubernetes expands ``$(VAR)``
  in a container's command from its environment, so the argv's leader host and rank become
  ``$(LWS_LEADER_ADDRESS)`` and ``$(LWS_WORKER_INDEX)``, as LeaderWorkerSet's own vLLM and SGLang examples write
  them. Every other ``$`` of the argv is doubled (``$$``), Kubernetes' escape, so no value from a user, a suite or a
  dataset is expanded.
- A **Service** (ClusterIP) selecting the leader's pod: the server's address.
- Secrets: a variable whose name is a secret's (:func:`dflashbench.redact.is_secret_name`) is read from a Secret
  (``valueFrom.secretKeyRef``) that the launcher creates through the API; the manifests name it, never hold its
  value. The suite's ``[cluster] secret`` (a Secret the user made: ``HF_TOKEN``, an API key) reaches every container
  through ``envFrom``.

A server placed on node(s) of its own gets a required pod anti-affinity against the run's other servers, by
hostname; the GPUs per node are ``nvidia.com/gpu`` limits (the NVIDIA device plugin's resource).
"""

from __future__ import annotations

import hashlib
import re

from dflashbench.backends.base import LEADER_HOST, NODE_RANK, LaunchPlan
from dflashbench.launchers.base import ServerRequest
from dflashbench.redact import is_secret_name

LWS_API = "leaderworkerset.x-k8s.io/v1"
RUN_LABEL = "dflashbench.io/run"
SERVER_LABEL = "dflashbench.io/server"
ROLE_LABEL = "dflashbench.io/role"
# The images an engine's own docs deploy, used where the suite's [cluster] image is not set (pin a release there):
# vLLM's "vllm/vllm-openai" (kubernetes-sigs/lws@v0.9.0 docs/examples/vllm/GPU/lws.yaml), SGLang's "lmsysorg/sglang"
# (the same repository's docs/examples/sglang/lws.yaml)
DEFAULT_IMAGES = {"vllm": "vllm/vllm-openai:latest", "sglang": "lmsysorg/sglang:latest"}
MAX_NAME = 45  # LeaderWorkerSet names its StatefulSets and pods after it, with suffixes; labels take 63 characters


def k8s_name(*parts: str) -> str:
    """A DNS-1123 name from ``parts`` (lowercase letters, digits and ``-``), shortened with a hash where long."""
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:MAX_NAME - 9].rstrip('-')}-{digest}"


def label_value(text: str) -> str:
    return k8s_name(text)[:63]


def names(request: ServerRequest) -> dict[str, str]:
    """The server's object names: its workload (Job or LeaderWorkerSet), Service and Secret."""
    base = k8s_name("dfb", request.run_id or "run", request.name)
    return {"workload": base, "service": base, "secret": f"{base}-env"[:63]}


def command(argv: tuple[str, ...]) -> list[str]:
    """The argv as a container's command: ``$`` doubled (Kubernetes' escape), the leader's host and the rank as
    LeaderWorkerSet's variables."""
    out = []
    for arg in argv:
        arg = arg.replace("$", "$$")
        arg = arg.replace(LEADER_HOST, "$(LWS_LEADER_ADDRESS)").replace(NODE_RANK, "$(LWS_WORKER_INDEX)")
        out.append(arg)
    return out


def labels(request: ServerRequest, role: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "dflashbench", "app.kubernetes.io/component": "server",
            RUN_LABEL: label_value(request.run_id or "run"), SERVER_LABEL: label_value(request.name), ROLE_LABEL: role}


def secret_env(request: ServerRequest) -> dict[str, str]:
    """The plan's variables that are secrets: what the launcher's Secret holds (never written to a file)."""
    return {k: v for k, v in request.plans[0].env.items() if is_secret_name(k)}


def _container(request: ServerRequest, plan: LaunchPlan, cluster, image: str, leader: bool) -> dict:
    secret = names(request)["secret"]
    env = [{"name": k, "value": v} for k, v in sorted(plan.env.items()) if not is_secret_name(k)]
    env += [{"name": k, "valueFrom": {"secretKeyRef": {"name": secret, "key": k}}}
            for k in sorted(plan.env) if is_secret_name(k)]  # fmt: skip
    container: dict = {"name": "server", "image": image, "command": command(plan.argv),
                       "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}  # fmt: skip
    if env:
        container["env"] = env
    if getattr(cluster, "secret", None):
        container["envFrom"] = [{"secretRef": {"name": cluster.secret}}]
    if request.gpus_per_node:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(request.gpus_per_node)}}
    if leader:
        container["ports"] = [{"name": "http", "containerPort": request.port}]
        container["readinessProbe"] = {"httpGet": {"path": request.health_path, "port": request.port},
                                       "periodSeconds": 10}  # fmt: skip
    return container


def _pod(request: ServerRequest, plan: LaunchPlan, cluster, image: str, role: str, restart: str | None) -> dict:
    spec: dict = {"containers": [_container(request, plan, cluster, image, role == "leader")],
                  "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]}  # fmt: skip
    if restart:
        spec["restartPolicy"] = restart
    if getattr(cluster, "node_selector", None):
        spec["nodeSelector"] = dict(cluster.node_selector)
    if request.own_nodes:  # no other server of this run on the same machine
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchExpressions": [
                {"key": RUN_LABEL, "operator": "In", "values": [label_value(request.run_id or "run")]},
                {"key": SERVER_LABEL, "operator": "NotIn", "values": [label_value(request.name)]}]}}]}}  # fmt: skip
    return {"metadata": {"labels": labels(request, role)}, "spec": spec}


def manifests(request: ServerRequest, cluster, engine: str) -> list[dict]:
    """The server's workload (a Job, or a LeaderWorkerSet across nodes) and its Service, in the order they are
    created."""
    namespace = getattr(cluster, "namespace", None) or "default"
    image = getattr(cluster, "image", None) or DEFAULT_IMAGES.get(engine, f"{engine}:latest")
    named = names(request)
    meta = {"name": named["workload"], "namespace": namespace, "labels": labels(request, "server")}
    if request.nodes == 1:
        workload = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                    "spec": {"backoffLimit": 0,
                             "template": _pod(request, request.plans[0], cluster, image, "leader", "Never")}}  # fmt: skip
    else:
        template = request.follower_template or request.plans[1]
        workload = {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": meta,
                    "spec": {"replicas": 1, "leaderWorkerTemplate": {
                        "size": request.nodes, "restartPolicy": "None",
                        "leaderTemplate": _pod(request, request.plans[0], cluster, image, "leader", None),
                        "workerTemplate": _pod(request, template, cluster, image, "follower", None)}}}  # fmt: skip
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": named["service"], "namespace": namespace, "labels": labels(request, "server")},
               "spec": {"type": "ClusterIP",
                        "selector": {RUN_LABEL: label_value(request.run_id or "run"),
                                     SERVER_LABEL: label_value(request.name), ROLE_LABEL: "leader"},
                        "ports": [{"name": "http", "port": request.port, "targetPort": request.port}]}}  # fmt: skip
    return [workload, service]


def as_yaml(docs: list[dict]) -> str:
    import yaml

    return "---\n".join(yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in docs)
