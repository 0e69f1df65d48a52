"""``sweep --cluster k8s`` (issue #67), with no cluster here: the manifests a dry run writes, validated offline against
the official schemas (Jobs and Services with kubernetes-validate's copies of Kubernetes' own; LeaderWorkerSets with
the CRD schema of kubernetes-sigs/lws v0.9.0, vendored in tests/fixtures/k8s/); and the launcher's submit, readiness
and teardown through the official ``kubernetes`` client, against a stand-in API server on loopback that speaks
enough of the API (create, get, list pods, pod logs, delete) and records every request the client sends."""

from __future__ import annotations

import http.server
import json
import re
import threading
from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="the test extra installs kubernetes-validate")
pytest.importorskip("kubernetes", reason="the k8s and test extras install the official kubernetes client")
import jsonschema  # noqa: E402  (kubernetes-validate's own dependency)
from typer.testing import CliRunner  # noqa: E402

from dflashbench.backends.base import LaunchPlan  # noqa: E402
from dflashbench.backends.process import ServerStartError  # noqa: E402
from dflashbench.cli import app  # noqa: E402
from dflashbench.launchers import jobs  # noqa: E402
from dflashbench.launchers.base import ServerRequest  # noqa: E402
from dflashbench.launchers.cluster_spec import ClusterSpec  # noqa: E402
from dflashbench.launchers.k8s import K8sLauncher  # noqa: E402
from dflashbench.launchers.k8s_manifests import label_value, manifests  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "k8s"
K8S_VERSION = "1.33"  # the Kubernetes release the manifests are checked against (LeaderWorkerSet needs 1.26 or later)


def strict(schema):
    """The CRD schema with every object's unknown fields refused where it lists its fields (kubectl's strict field
    validation; an OpenAPI schema without additionalProperties would let a misspelt key through)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):  # fmt: skip
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(x) for x in schema]
    return schema


LWS_SCHEMA = strict(json.loads((FIXTURES / "leaderworkerset-v1.schema.json").read_text()))


def validate(doc: dict) -> None:
    """Raise where ``doc`` is not a valid object of its kind."""
    if doc["kind"] == "LeaderWorkerSet":
        jsonschema.validate(doc, LWS_SCHEMA)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def dry_run(tmp_path: Path, *flags: str) -> dict[str, list[dict]]:
    """``dflashbench sweep --backend vllm --dry-run FLAGS``: each server's manifests, as the dry run wrote them."""
    done = CliRunner().invoke(app, ["sweep", "--backend", "vllm", "--dry-run", "-o", str(tmp_path), *flags])
    assert done.exit_code == 0, done.output
    written = sorted((tmp_path / "default-dry-run" / "k8s").glob("*.yaml"))
    assert written, done.output
    assert all(f"k8s submission written: {p}" in done.output for p in written)
    return {p.stem: list(yaml.safe_load_all(p.read_text())) for p in written}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_gpt_oss_120b_on_two_nodes_of_8xh100_gives_a_job_and_a_service_per_server_that_validate(tmp_path):
    docs = dry_run(tmp_path, "--model", "gpt-oss-120b", "--gpu", "2x8xh100", "--cluster", "k8s")
    # in stages over the two nodes (AR and DFlash, then EAGLE-3 and its replica), each server on a node of its own
    assert set(docs) == {"ar", "dflash", "eagle3", "eagle3#2"}
    for name, (workload, service) in docs.items():
        assert workload["kind"] == "Job" and service["kind"] == "Service"
        validate(workload)
        validate(service)
        pod = workload["spec"]["template"]["spec"]
        assert pod["restartPolicy"] == "Never" and workload["spec"]["backoffLimit"] == 0
        command = pod["containers"][0]["command"]
        assert command[:3] == ["vllm", "serve", "openai/gpt-oss-120b"] and "--nnodes" not in command
        assert service["spec"]["selector"]["dflashbench.io/server"] == label_value(name)
        assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


def test_glm_5_3_across_2x8xb200_gives_a_leaderworkerset_per_method_that_validates(tmp_path):
    docs = dry_run(tmp_path, "--model", "glm-5.3", "--method", "ar,dflash2,mtp", "--gpu", "2x8xb200", "--cluster", "k8s")
    assert set(docs) == {"ar", "dflash2", "mtp"}
    for workload, service in docs.values():
        assert workload["kind"] == "LeaderWorkerSet"
        validate(workload)
        validate(service)
        group = workload["spec"]["leaderWorkerTemplate"]
        assert group["size"] == 2 and group["restartPolicy"] == "None"
        leader = group["leaderTemplate"]["spec"]["containers"][0]
        worker = group["workerTemplate"]["spec"]["containers"][0]
        assert leader["resources"]["limits"]["nvidia.com/gpu"] == "8"
        joined = " ".join(leader["command"])
        assert "--tensor-parallel-size 8 --pipeline-parallel-size 2 --nnodes 2 --node-rank 0" in joined
        assert "--master-addr $(LWS_LEADER_ADDRESS) --master-port 29501" in joined and "--headless" not in joined
        assert "--node-rank $(LWS_WORKER_INDEX)" in " ".join(worker["command"]) and "--headless" in worker["command"]
        assert "readinessProbe" in leader and "readinessProbe" not in worker  # the follower serves no HTTP


def test_the_check_refuses_what_kubernetes_would(tmp_path):
    """Negative controls: the validation can fail (a misspelt key, a wrong type)."""
    docs = dry_run(tmp_path, "--model", "glm-5.3", "--method", "ar", "--gpu", "2x8xb200", "--cluster", "k8s")
    workload, service = docs["ar"]
    workload["spec"]["leaderWorkerTemplate"]["sizee"] = 2
    with pytest.raises(jsonschema.ValidationError, match="sizee"):
        validate(workload)
    service["spec"]["ports"][0]["port"] = "http"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(service)


def request(tmp_path: Path, argv=("vllm", "serve", "m"), env=None, nodes: int = 1, port: int = 18123) -> ServerRequest:
    plans = tuple(LaunchPlan(tuple(argv), env=dict(env or {})) for _ in range(nodes))
    return ServerRequest(name="dflash", label="vllm dflash server", plans=plans, port=port,
                         log_path=tmp_path / "run" / "server-vllm-dflash.log", run_id="demo-1", engine="vllm",
                         gpus_per_node=8)  # fmt: skip


def test_no_value_is_expanded_and_no_secret_is_written(tmp_path):
    hostile = ("vllm", "serve", "m", "$(touch pwned)", "${HOME}", "$$", "--x=$((1+1))")
    env = {"VLLM_API_KEY": "sk-live-Zq8rT4vXa1", "VLLM_SERVER_DEV_MODE": "1"}
    workload, _ = manifests(request(tmp_path, hostile, env), ClusterSpec(kind="k8s", secret="hf-token"), "vllm")
    container = workload["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][3:] == ["$$(touch pwned)", "$${HOME}", "$$$$", "--x=$$((1+1))"]  # Kubernetes' escape
    text = yaml.safe_dump(workload)
    assert "sk-live-Zq8rT4vXa1" not in text
    assert {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "dfb-demo-1-dflash-env",
                                                                   "key": "VLLM_API_KEY"}}} in container["env"]  # fmt: skip
    assert container["envFrom"] == [{"secretRef": {"name": "hf-token"}}]


# --- submit and teardown through the official client, against a stand-in API server -----------------------------


class FakeApi(http.server.ThreadingHTTPServer):
    """Enough of the Kubernetes API for the launcher: objects created, read and deleted by path; pods listed from
    ``self.pods`` (the test sets their state); every request recorded as (method, path, body)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.objects: dict[str, dict] = {}
        self.requests: list[tuple[str, str, dict | None]] = []
        self.pods: list[dict] = []
        self.log_text = "INFO serving; non-default args: {'api_key': 'sk-live-Zq8rT4vXa1'}\n"


class Handler(http.server.BaseHTTPRequestHandler):
    server: FakeApi

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, code: int, body, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _path(self) -> str:
        return self.path.split("?")[0]

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(("POST", self._path(), body))
        if body.get("kind") == "Service":
            body.setdefault("spec", {})["clusterIP"] = "127.0.0.1"
        self.server.objects[f"{self._path()}/{body['metadata']['name']}"] = body
        self._send(201, body)

    def do_GET(self) -> None:  # noqa: N802
        path = self._path()
        self.server.requests.append(("GET", self.path, None))
        if re.fullmatch(r"/api/v1/namespaces/[^/]+/pods", path):
            return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": self.server.pods})
        if path.endswith("/log"):
            return self._send(200, self.server.log_text, "text/plain")
        if path in self.server.objects:
            return self._send(200, self.server.objects[path])
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})

    def do_DELETE(self) -> None:  # noqa: N802
        path = self._path()
        self.server.requests.append(("DELETE", path, None))
        found = self.server.objects.pop(path, None)
        if found is None:
            return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                    "code": 404})  # fmt: skip
        # a deleted Service comes back as itself (the client reads a V1Service), the others as a Status
        self._send(200, found if "/services/" in path else {"kind": "Status", "apiVersion": "v1", "status": "Success"})


class Health(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()


def pod(name: str, phase: str, role: str = "leader", scheduled: str | None = None, restarts: int = 0) -> dict:
    status: dict = {"phase": phase}
    if scheduled:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": scheduled}]  # fmt: skip
    if phase == "Running":
        status["containerStatuses"] = [{"name": "server", "ready": True, "restartCount": restarts, "image": "x",
                                        "imageID": "", "state": {"running": {}}}]  # fmt: skip
    return {"metadata": {"name": name, "labels": {"dflashbench.io/role": role}}, "status": status,
            "spec": {"nodeName": "gpu-node-7", "containers": [{"name": "server"}]}}


@pytest.fixture
def api(tmp_path, monkeypatch):
    fake = FakeApi()
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": f"http://127.0.0.1:{fake.server_address[1]}"}}],
        "users": [{"name": "test", "user": {"token": "tok-Kd93jQ0pL2"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}]}))  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod: the kubeconfig is read
    yield fake
    fake.shutdown()


@pytest.fixture
def health():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_a_server_is_created_waited_for_and_deleted_through_the_api(tmp_path, api, health):
    cluster = ClusterSpec(kind="k8s", namespace="bench")
    req = request(tmp_path, env={"VLLM_API_KEY": "sk-live-Zq8rT4vXa1"}, port=health)
    req.run_dir.mkdir(parents=True)
    api.pods = [pod("dfb-demo-1-dflash-abcde", "Running")]
    with K8sLauncher(cluster).start(req) as server:
        created = [(m, p) for m, p, _ in api.requests if m == "POST"]
        assert created == [("POST", "/api/v1/namespaces/bench/secrets"), ("POST", "/apis/batch/v1/namespaces/bench/jobs"),
                           ("POST", "/api/v1/namespaces/bench/services")]  # fmt: skip
        secret = api.requests[0][2]
        assert secret["stringData"] == {"VLLM_API_KEY": "sk-live-Zq8rT4vXa1"}  # only through the API, from memory
        server.wait_ready("/health", timeout_s=10, progress=False)
        assert server.base_url == f"http://127.0.0.1:{health}" and server.is_running()
        assert server.record() == {"launcher": "k8s", "namespace": "bench", "objects": {
            "workload": "dfb-demo-1-dflash", "service": "dfb-demo-1-dflash", "secret": "dfb-demo-1-dflash-env"},
            "host": "127.0.0.1", "nodes": ["gpu-node-7"]}  # where it ran, once it does
    deleted = [p for m, p, _ in api.requests if m == "DELETE"]
    assert deleted == ["/apis/batch/v1/namespaces/bench/jobs/dfb-demo-1-dflash",
                       "/apis/leaderworkerset.x-k8s.io/v1/namespaces/bench/leaderworkersets/dfb-demo-1-dflash",
                       "/api/v1/namespaces/bench/services/dfb-demo-1-dflash",
                       "/api/v1/namespaces/bench/secrets/dfb-demo-1-dflash-env"]  # fmt: skip
    assert not api.objects  # nothing left
    log = req.log_path.read_text()
    assert "# dflashbench: pod dfb-demo-1-dflash-abcde" in log and "sk-live-Zq8rT4vXa1" not in log  # collected, redacted
    assert [e["event"] for e in jobs.read(req.run_dir)] == ["submitting", "submitted", "torn down"]


def test_a_pod_that_never_schedules_is_a_clear_failure_and_nothing_is_left(tmp_path, api):
    cluster = ClusterSpec(kind="k8s", namespace="bench", queue_timeout_s=0.5)
    req = request(tmp_path, nodes=2)
    req.run_dir.mkdir(parents=True)
    api.pods = [pod("dfb-demo-1-dflash-0", "Pending", scheduled="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")]
    server = K8sLauncher(cluster).start(req)
    assert ("POST", "/apis/leaderworkerset.x-k8s.io/v1/namespaces/bench/leaderworkersets") in \
        [(m, p) for m, p, _ in api.requests]  # fmt: skip
    with pytest.raises(ServerStartError, match="did not run within 0.5s: pod dfb-demo-1-dflash-0 not scheduled: 0/4 "
                                               "nodes are available: 4 Insufficient nvidia.com/gpu"):  # fmt: skip
        server.wait_ready("/health", timeout_s=10, progress=False)
    assert not api.objects


def test_a_restarted_server_is_no_longer_the_one_measured(tmp_path, api, health):
    req = request(tmp_path, port=health)
    req.run_dir.mkdir(parents=True)
    api.pods = [pod("p", "Running")]
    with K8sLauncher(ClusterSpec(kind="k8s")).start(req) as server:
        server.wait_ready("/health", timeout_s=10, progress=False)
        api.pods = [pod("p", "Running", restarts=1)]
        assert not server.is_running()
        assert server.describe_exit() == "Kubernetes dfb-demo-1-dflash: pod p's server restarted 1 time(s)"


def test_resume_deletes_what_a_killed_sweep_left(tmp_path, api):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    api.objects["/apis/batch/v1/namespaces/default/jobs/dfb-demo-1-ar"] = {"kind": "Job"}
    api.objects["/api/v1/namespaces/default/services/dfb-demo-1-ar"] = {"kind": "Service"}
    jobs.append(run_dir, launcher="k8s", event="submitting", name="dfb-demo-1-ar", kind="Job", namespace="default")
    said: list[str] = []
    K8sLauncher(ClusterSpec(kind="k8s")).stop_leftovers(run_dir, {}, said.append)
    assert said == ["deleted Job, Service dfb-demo-1-ar that an earlier sweep of this run created and left"]
    assert not api.objects and jobs.outstanding(run_dir, "k8s") == []
