"""Kubernetes: each server its objects (:mod:`dflashbench.launchers.k8s_manifests`: a Job, or a LeaderWorkerSet
across nodes, and a Service), created and deleted through the official ``kubernetes`` Python client (the ``k8s``
extra: ``pip install 'dflashbench[k8s]'``), which reads the kubeconfig as kubectl does, or the pod's service
account where dflashbench itself runs in the cluster.

The client measures from where ``dflashbench sweep`` runs, one clock for every method (the reasons are Slurm's:
:mod:`dflashbench.launchers.slurm`); the address is the Service's cluster IP, so that place must route cluster IPs:
a pod in the cluster (docs/cluster.md runs the sweep as one) or a node. Readiness: the pods by the server's labels,
a pod the scheduler cannot place (``PodScheduled`` false: its message) waited for up to ``[cluster]
queue_timeout_s``, a container that ended or restarted (a LeaderWorkerSet's pods restart in place) a failure with
its state, then the leader's ``/health`` through the Service. Teardown deletes the workload, the Service and the
Secret, after copying every pod's log into the run directory (redacted). Every object is recorded in
``cluster-jobs.jsonl`` as it is created, so ``--resume`` deletes what a SIGKILLed sweep left.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from dflashbench.backends.process import LiveServers, ServerStartError, health_ok, log_tail
from dflashbench.errors import UserError
from dflashbench.launchers import jobs
from dflashbench.launchers.base import Echo, ServerRequest
from dflashbench.launchers.k8s_manifests import (
    LWS_API,
    ROLE_LABEL,
    RUN_LABEL,
    SERVER_LABEL,
    as_yaml,
    label_value,
    manifests,
    names,
    secret_env,
)
from dflashbench.redact import redact_text

POLL_S = 2.0
_LIVE = LiveServers(lambda server: server.stop())


def client_modules():
    try:
        from kubernetes import client, config
    except ImportError:
        raise UserError("--cluster k8s uses the official Kubernetes client: pip install 'dflashbench[k8s]' "
                        "(the kubernetes package)") from None  # fmt: skip
    return client, config


def api_client():
    """A client configured as kubectl is (``KUBECONFIG`` or ~/.kube/config), or from the pod's service account."""
    client, config = client_modules()
    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            # KUBECONFIG as it is now (the client reads it once, when imported)
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
        except (config.ConfigException, OSError, TypeError) as exc:
            raise UserError(f"--cluster k8s found no cluster to talk to ({exc}): run where kubectl works "
                            "(KUBECONFIG), or in a pod of the cluster") from None  # fmt: skip
    return client.ApiClient()


class K8sServer:
    """One server's Kubernetes objects, from creation to deletion: a :class:`~dflashbench.launchers.base.Launched`."""

    def __init__(self, request: ServerRequest, cluster, api) -> None:
        from kubernetes import client

        self.request = request
        self.cluster = cluster
        self.namespace = getattr(cluster, "namespace", None) or "default"
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.name = request.label
        self.log_path = request.log_path
        self.names = names(request)
        self.host: str | None = None
        self.ended: str | None = None  # how it ended, once it has
        self._stopped = False

    @property
    def selector(self) -> str:
        return f"{RUN_LABEL}={label_value(self.request.run_id or 'run')},{SERVER_LABEL}={label_value(self.request.name)}"

    # --- create ---

    def submit(self) -> K8sServer:
        from kubernetes.client.exceptions import ApiException

        workload, service = manifests(self.request, self.cluster, self.request.engine)
        kind = workload["kind"]
        run_dir = self.request.run_dir
        jobs.append(run_dir, launcher="k8s", event="submitting", name=self.names["workload"], kind=kind,
                    namespace=self.namespace, server=self.request.name)  # fmt: skip
        _LIVE.add(self)
        try:
            secrets = secret_env(self.request)
            if secrets:  # created from memory: no file holds the values
                self.core.create_namespaced_secret(self.namespace, {
                    "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "stringData": secrets,
                    "metadata": {"name": self.names["secret"], "labels": workload["metadata"]["labels"]}})  # fmt: skip
            if kind == "Job":
                self.batch.create_namespaced_job(self.namespace, workload)
            else:
                group, version = LWS_API.split("/")
                self.custom.create_namespaced_custom_object(group, version, self.namespace, "leaderworkersets",
                                                            workload)  # fmt: skip
            self.core.create_namespaced_service(self.namespace, service)
        except ApiException as exc:
            self.stop()
            raise ServerStartError(f"Kubernetes refused the {self.name}'s objects: {exc.status} {exc.reason}: "
                                   f"{_message(exc)}") from None  # fmt: skip
        jobs.append(run_dir, launcher="k8s", event="submitted", name=self.names["workload"], kind=kind,
                    namespace=self.namespace, id=self.names["workload"], server=self.request.name)  # fmt: skip
        return self

    # --- state ---

    def pods(self) -> list:
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items)

    def trouble(self, pods: list) -> str | None:
        """Why the server is not running as launched: a pod failed, a container ended or restarted."""
        for pod in pods:
            if pod.status.phase in ("Failed", "Succeeded"):
                return f"pod {pod.metadata.name} {pod.status.phase}" + _terminated(pod)
            for status in pod.status.container_statuses or []:
                if status.restart_count:
                    return f"pod {pod.metadata.name}'s server restarted {status.restart_count} time(s)" + _terminated(pod)
        return None

    @property
    def base_url(self) -> str:
        if self.host is None:
            raise RuntimeError(f"{self.name} has no address before it runs")
        return f"http://{self.host}:{self.request.port}"

    def is_running(self) -> bool:
        if self.ended is not None:
            return False
        pods = self.pods()
        why = self.trouble(pods)
        if why is None and len(pods) < self.request.nodes:
            why = f"{self.request.nodes - len(pods)} of its {self.request.nodes} pod(s) gone"
        if why is not None:
            self.ended = why
            return False
        return all(p.status.phase == "Running" for p in pods)

    @property
    def returncode(self) -> int | None:
        return None if self.ended is None else 1

    def describe_exit(self) -> str:
        return f"Kubernetes {self.names['workload']}: {self.ended or 'not running'}"

    def wait_exit(self, timeout_s: float) -> int | None:
        deadline = time.monotonic() + timeout_s
        while self.is_running():
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(0.5, timeout_s))
        return self.returncode

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines)

    def record(self) -> dict:
        """Its objects and, once it runs, its address and the nodes its pods run on."""
        out = {"launcher": "k8s", "namespace": self.namespace, "objects": dict(self.names)}
        if self.host is not None:
            out.update(host=self.host, nodes=sorted({p.spec.node_name for p in self.pods()
                                                     if p.spec is not None and p.spec.node_name}))  # fmt: skip
        return out

    # --- ready ---

    def wait_ready(self, health_path: str, timeout_s: float, *, progress: bool = True, echo: Echo | None = None) -> float:
        say = echo or (lambda text: print(text, file=sys.stderr, flush=True))
        started = time.monotonic()
        queue_limit = getattr(self.cluster, "queue_timeout_s", 3600.0)
        said = ""
        while True:
            pods = self.pods()
            why = self.trouble(pods)
            if why is not None:
                self.ended = why
                self.stop()
                raise ServerStartError(self._failure(f"ended before it served: {why}"))
            unscheduled = [m for p in pods for m in _unschedulable(p)]
            if len(pods) == self.request.nodes and all(p.status.phase == "Running" for p in pods):
                break
            waiting = unscheduled[0] if unscheduled else f"{len(pods)} of {self.request.nodes} pod(s) created"
            if progress and waiting != said:
                said = waiting
                say(f"waiting for Kubernetes to run {self.name}: {waiting}")
            if time.monotonic() - started > queue_limit:
                self.ended = f"never scheduled: {waiting}"
                self.stop()
                raise ServerStartError(self._failure(
                    f"did not run within {queue_limit:g}s: {waiting} (deleted; raise [cluster] queue_timeout_s, or "
                    "--resume later)"))  # fmt: skip
            time.sleep(POLL_S)
        service = self.core.read_namespaced_service(self.names["service"], self.namespace)
        self.host = service.spec.cluster_ip
        url = self.base_url + health_path
        if progress:
            say(f"waiting for {self.name} at {url} ...")
        running = time.monotonic()
        while True:
            if not self.is_running():
                self.stop()
                raise ServerStartError(self._failure(f"ended while starting: {self.ended}"))
            if health_ok(url):
                elapsed = time.monotonic() - started
                if progress:
                    say(f"{self.name} ready after {elapsed:.1f}s")
                return elapsed
            if time.monotonic() - running > timeout_s:
                self.stop()
                raise ServerStartError(self._failure(f"did not answer {url} within {timeout_s:g}s of running "
                                                     "(deleted; raise --ready-timeout if it is still loading)"))  # fmt: skip
            time.sleep(0.5)

    def _failure(self, what: str) -> str:
        tail = self.log_tail()
        shown = f"; last lines of {self.log_path}:\n{tail}" if tail else ""
        return f"{self.name} {what}{shown}"

    # --- delete ---

    def collect_logs(self) -> None:
        """Every pod's log into the run directory (the leader's as the server's log, follower ``r``'s as
        ``...log.node<r>``), redacted."""
        from kubernetes.client.exceptions import ApiException

        try:
            pods = self.pods()
        except ApiException:
            return
        for pod in pods:
            rank = 0 if (pod.metadata.labels or {}).get(ROLE_LABEL) == "leader" else _worker_index(pod)
            try:
                text = self.core.read_namespaced_pod_log(pod.metadata.name, self.namespace)
            except ApiException:
                continue
            path = self.request.node_log(rank)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(f"# dflashbench: pod {pod.metadata.name}\n{redact_text(text)}")

    def stop(self, grace_s: float | None = None) -> int | None:
        """Copy the logs, then delete the workload, the Service and the Secret (a missing one is not an error)."""
        if self._stopped:
            return self.returncode
        self._stopped = True
        self.collect_logs()
        delete_objects(self.core, self.batch, self.custom, self.namespace, self.names)
        jobs.append(self.request.run_dir, launcher="k8s", event="torn down", name=self.names["workload"],
                    namespace=self.namespace)  # fmt: skip
        _LIVE.discard(self)
        return self.returncode

    def __enter__(self) -> K8sServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def delete_objects(core, batch, custom, namespace: str, named: dict[str, str]) -> list[str]:
    """Delete a server's objects by name, its pods with them (background propagation); the ones there were."""
    from kubernetes.client.exceptions import ApiException

    group, version = LWS_API.split("/")
    calls = [
        ("Job", lambda: batch.delete_namespaced_job(named["workload"], namespace, propagation_policy="Background")),
        ("LeaderWorkerSet", lambda: custom.delete_namespaced_custom_object(
            group, version, namespace, "leaderworkersets", named["workload"], propagation_policy="Background")),
        ("Service", lambda: core.delete_namespaced_service(named["service"], namespace)),
        ("Secret", lambda: core.delete_namespaced_secret(named["secret"], namespace)),
    ]  # fmt: skip
    deleted = []
    for kind, call in calls:
        try:
            call()
            deleted.append(kind)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return deleted


def _message(exc) -> str:
    import json

    try:
        return json.loads(exc.body).get("message", "")
    except (TypeError, ValueError, AttributeError):
        return str(exc.body or "")[:300]


def _terminated(pod) -> str:
    for status in pod.status.container_statuses or []:
        done = status.state.terminated if status.state else None
        done = done or (status.last_state.terminated if status.last_state else None)
        if done is not None:
            return f" (container {status.name}: {done.reason or 'terminated'}, exit code {done.exit_code})"
    return ""


def _unschedulable(pod) -> list[str]:
    return [f"pod {pod.metadata.name} not scheduled: {c.message or c.reason}" for c in pod.status.conditions or []
            if c.type == "PodScheduled" and c.status == "False"]  # fmt: skip


def _worker_index(pod) -> int:
    try:
        return int((pod.metadata.labels or {}).get("leaderworkerset.sigs.k8s.io/worker-index", "1"))
    except ValueError:
        return 1



class K8sLauncher:
    kind = "k8s"
    listen_host = "0.0.0.0"  # noqa: S104 - reached through its Service
    where = ("Kubernetes: a Job per server on one node, a LeaderWorkerSet per server across nodes, a Service for its "
             "address; the client measures from where the sweep runs (a pod in the cluster), one clock for every "
             "method")  # fmt: skip

    def __init__(self, cluster=None) -> None:
        self.cluster = cluster
        self._api = None

    def api(self):
        if self._api is None:
            self._api = api_client()
        return self._api

    def start(self, request: ServerRequest) -> K8sServer:
        return K8sServer(request, self.cluster, self.api()).submit()

    def submission(self, request: ServerRequest) -> dict[str, str]:
        """The manifests (workload and Service) as YAML; the Secret, which would hold values, is created through the
        API only and named in them."""
        return {f"k8s/{request.name}.yaml": as_yaml(manifests(request, self.cluster, request.engine))}

    def stop_leftovers(self, run_dir: Path, servers: dict, echo: Echo) -> None:
        """Delete the objects an earlier sweep of this run created and did not delete (``cluster-jobs.jsonl``)."""
        left = jobs.outstanding(Path(run_dir), "k8s")
        if not left:
            return
        from kubernetes import client

        api = self.api()
        core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
        namespace = getattr(self.cluster, "namespace", None) or "default"
        for entry in left:
            base = entry["name"]
            deleted = delete_objects(core, batch, custom, namespace,
                                     {"workload": base, "service": base, "secret": f"{base}-env"[:63]})  # fmt: skip
            if deleted:
                echo(f"deleted {', '.join(deleted)} {base} that an earlier sweep of this run created and left")
            jobs.append(Path(run_dir), launcher="k8s", event="torn down", name=base, namespace=namespace,
                        why="--resume: left by an earlier sweep")  # fmt: skip
