"""What a sweep runs: the resolved configuration, its grid of points, and each point's requests.

A grid point is one measurement (method x workload x concurrency or request rate, per repeat round) and
carries everything it is run with: its place in the run order, and the server launch of its method, built
once per method when the sweep is planned (so the dry run, the manifest and the launch show the same argv).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from dflashbench.backends.base import NODE_RANK, LaunchPlan, ServerSpec
from dflashbench.backends.process import free_port, port_is_free
from dflashbench.errors import UserError
from dflashbench.launchers import listen_host
from dflashbench.load.arrivals import rate_label
from dflashbench.plan.cpus import CpuPartition
from dflashbench.plan.pairing import ModelPair, server_spec
from dflashbench.plan.placement import Placement, Server
from dflashbench.plan.suites import Suite
from dflashbench.plan.trace_plan import TracePoint, trace_points
from dflashbench.types import Method, PointKey, Request
from dflashbench.workloads.spec import WorkloadSpec

WARMUP_MAX_TOKENS = 32


@dataclass(frozen=True)
class MethodLaunch:
    """The server a method is measured on: what the backend was asked for and the command that starts it."""

    spec: ServerSpec
    plan: LaunchPlan  # the leader's (node 0, the HTTP server)
    followers: tuple[LaunchPlan, ...] = ()  # nodes 1.. of a server that spans nodes, each its own argv
    follower_template: LaunchPlan | None = None  # every follower's argv, its rank backends.base.NODE_RANK

    @property
    def base_url(self) -> str:
        return self.spec.base_url

    @property
    def plans(self) -> tuple[LaunchPlan, ...]:
        """Every node's launch plan, the leader's first."""
        return (self.plan, *self.followers)


@dataclass(frozen=True)
class GridPoint:
    key: PointKey  # its identity (str(key) is its id: stable across --resume and run orders)
    method: Method
    workload: WorkloadSpec
    concurrency: int  # closed-loop streams; for a rate point its max_concurrency, else 0
    repeat: int = 0  # the round (sweep --repeats): round r runs every method's points before round r + 1
    request_rate: float | None = None  # an open-loop point (dflashbench.load.openloop), requests per second
    index: int = 0  # 1-based place in the run order
    launch: MethodLaunch | None = field(default=None, compare=False)  # None: a server someone else runs
    trace: TracePoint | None = None  # a trace replay (dflashbench.plan.trace_plan): its requests come from the trace

    @property
    def point_id(self) -> str:
        """``reference:dflash:synthetic:c4`` (``/r1`` in a run with repeats): what its rows record."""
        return str(self.key)

    @property
    def closed_loop(self) -> bool:
        """A fixed number of streams (neither an arrival rate nor a trace's arrivals)."""
        return self.request_rate is None and self.trace is None

    @property
    def workload_label(self) -> str:
        """What the point's rows name as their workload (a trace point: the trace and its content)."""
        return self.trace.workload_label if self.trace is not None else self.workload.label

    def label(self, backend: str, total: int, repeats: int) -> str:
        """The point as the console names it: ``[3/36] reference dflash synthetic c=4 repeat 2/3``."""
        load = f"rate={self.request_rate:g}/s" if self.request_rate is not None else f"c={self.concurrency}"
        if self.trace is not None:
            text = f"[{self.index}/{total}] {backend} {self.method.value} {self.trace.describe()}"
            return text + (f" repeat {self.repeat + 1}/{repeats}" if repeats > 1 else "")
        text = f"[{self.index}/{total}] {backend} {self.method.value} {self.workload.label} {load}"
        return text + (f" repeat {self.repeat + 1}/{repeats}" if repeats > 1 else "")


@dataclass
class SweepContext:
    """A sweep's configuration once resolved: the suite with its model pair, the grid, the requests."""

    suite: Suite
    backend_name: str  # what points record: the engine (for --endpoint: its flavour)
    endpoint: str | None
    pair: ModelPair
    num_gpus: int
    grid: list[GridPoint]
    plan: dict[int, list[Request] | str]  # requests by workload index; a dry run's line for a Hub dataset
    api_key: str | None
    endpoints: list[str] = field(default_factory=list)  # every replica when several (the first is endpoint)
    launches: dict[Method, MethodLaunch] = field(default_factory=dict)  # none for a server someone else runs
    cpus: CpuPartition | None = None  # the engine's CPUs and the client's (dflashbench.plan.cpus)
    traces: dict = field(default_factory=dict)  # trace content -> its TracePlan (dflashbench.plan.trace_plan)
    interleave: bool = False  # every method's server up for the round, a load's methods measured together (build_grid)
    placement: Placement | None = None  # where each server runs and which run at once (dflashbench.plan.placement)
    server_launches: dict[str, MethodLaunch] = field(default_factory=dict)  # by server name: replicas too
    # AR's results of the points sized by precision so far, by (workload, load, round, method): a speculative
    # method's sized point pairs with AR's of the same workload, load and round (dflashbench.run.precision)
    finished_results: dict = field(default_factory=dict)
    # What the launched servers' own KV reports said (dflashbench.run.capacity): the common capacity in requests,
    # the method whose server set it, and any server more than 5 % below it
    capacity: dict = field(default_factory=dict)
    # The methods whose draft length --num-draft-tokens set (dflashbench.plan.draft_lengths says where each came from)
    flagged_draft_lengths: frozenset = frozenset()
    # Where the servers run (dflashbench.launchers: this machine, a Slurm job, Kubernetes objects); made once by
    # dflashbench.run.launching.launcher_of from the suite's [cluster] table
    launcher: object | None = None

    def requests_for(self, point: GridPoint) -> list[Request]:
        """The point's requests: its workload's, reused until every stream has its share; a trace point's, the
        trace's (one per request of its window, in arrival order)."""
        if point.trace is not None:
            plan = self.traces[point.trace.content]
            assert not isinstance(plan, str), "a dry run's trace plan is not run"
            return plan.requests
        requests = self.plan[self.suite.workloads.index(point.workload)]
        assert not isinstance(requests, str), "a dry run's plan is not run"
        return fill_streams(requests, max(point.concurrency, 1), self.suite.requests_per_stream_at(point.concurrency))


def num_gpus_for(suite: Suite, backend: str, on_cpu: bool = False) -> int:
    """GPUs in use: the suite's ``num_gpus`` when set; none for an engine that computes on the CPU (``on_cpu``:
    vLLM's CPU build); the reference backend counts 0 unless told to use CUDA (its server runs on the CPU by
    default); engines use tp x dp."""
    if suite.num_gpus is not None:
        return suite.num_gpus
    if on_cpu:
        return 0
    if backend == "reference":
        args = [a for m in suite.methods for a in suite.args_for(m)]
        return 1 if any("cuda" in a for a in args) else 0
    return suite.gpu_count


def plan_launches(suite: Suite, pair: ModelPair, backend, cpus: CpuPartition | None = None,
                  placement: Placement | None = None) -> dict[Method, MethodLaunch]:  # fmt: skip
    """Each method's (first) server launch, built once: a launch that cannot be built is a configuration error,
    reported before anything runs. The port is picked now; :func:`launch_on_free_port` re-picks it at launch time if
    something else took it meanwhile. ``cpus``: the engine's own CPUs, where the sweep split them (one set for all,
    or one per server); ``placement``: each server's GPUs (:func:`plan_server_launches` has the replicas too)."""
    return {Method.parse(name): launch for name, launch in plan_server_launches(suite, pair, backend, cpus,
                                                                              placement).items() if "#" not in name}


def plan_server_launches(suite: Suite, pair: ModelPair, backend, cpus: CpuPartition | None = None,
                         placement: Placement | None = None) -> dict[str, MethodLaunch]:  # fmt: skip
    """Every server's launch by its name (``ar``, a replica ``ar#2``)."""
    servers = placement.servers if placement is not None and placement.servers else \
        tuple(Server(m) for m in suite.methods)  # fmt: skip
    return {s.name: server_launch(suite, pair, backend, s, cpus) for s in servers}


def server_launch(suite: Suite, pair: ModelPair, backend, server: Server, cpus: CpuPartition | None = None,
                  port: int | None = None) -> MethodLaunch:  # fmt: skip
    """One server's launch: its method's spec with its own CPUs and GPUs (``CUDA_VISIBLE_DEVICES``)."""
    engine_cpus = server.cpus or (cpus.servers.get(server.method.value) if cpus is not None else None) or \
        (cpus.engine if cpus is not None and cpus.split else None)  # fmt: skip
    spec = server_spec(suite, server.method, pair, port or free_port())
    spec = dataclasses.replace(spec, engine_cpus=tuple(engine_cpus) if engine_cpus else None,
                               env={**spec.env, **server.env()}, host=listen_host(suite.cluster))  # fmt: skip
    return _launch(spec, backend)


def relaunch(spec: ServerSpec, backend) -> MethodLaunch:
    """A launch rebuilt for a changed spec (the sweep caps a server to the capacity a first server reported)."""
    return _launch(spec, backend)


def _launch(spec: ServerSpec, backend) -> MethodLaunch:
    plan = backend.launch_plan(spec)
    if spec.engine_cpus and plan.cpus is None:  # every backend's server can be pinned, not only those that ask
        plan = dataclasses.replace(plan, cpus=spec.engine_cpus)
    if spec.nnodes <= 1:
        return MethodLaunch(spec, plan)
    # a server across nodes: each follower's own argv (a launcher that starts every node, Slurm), and one for them all
    # with the rank left to the scheduler (LeaderWorkerSet's worker template)
    followers = tuple(backend.launch_plan(dataclasses.replace(spec, node_rank=r)) for r in range(1, spec.nnodes))
    template = backend.launch_plan(dataclasses.replace(spec, node_rank=NODE_RANK))
    return MethodLaunch(spec, plan, followers, template)


def launch_on_free_port(launch: MethodLaunch, backend) -> tuple[MethodLaunch, str | None]:
    """``launch`` as planned while its port is free, else the same server on a fresh port, with a note."""
    if port_is_free(launch.spec.port, launch.spec.host):
        return launch, None
    spec = dataclasses.replace(launch.spec, port=free_port(launch.spec.host))
    note = f"port {launch.spec.port} was taken since the sweep was planned: the server starts on {spec.port} instead"
    return _launch(spec, backend), note


def build_grid(suite: Suite, backend: str, launches: dict[Method, MethodLaunch] | None = None,
               interleave: bool = False) -> list[GridPoint]:  # fmt: skip
    """Grid points in run order, ids stable across ``--resume`` and across orders (a repeat's id ends in
    ``/r<round>``: :class:`dflashbench.types.PointKey`).

    One method at a time: repeat round x method x workload x concurrency (then rates, then trace replays), so with
    ``repeats`` > 1 a slow drift of the machine hits every method alike. Together (``interleave``: side by side, in
    turn or point by point, :mod:`dflashbench.plan.placement`): repeat round x that same load order x method, every
    method of one load next to each other."""
    labels = Counter(w.label for w in suite.workloads)
    launches = launches or {}
    place = {m: k for k, m in enumerate(suite.methods)}
    cells: list[tuple[int, int, int, PointKey, dict]] = []  # (round, place in the method's own order, method, key, fields)

    def key(method: Method, workload: str, load: str, repeat: int) -> PointKey:  # a run without repeats: no round
        return PointKey(backend, method.value, workload, load, repeat if suite.repeats > 1 else None)

    for repeat in range(suite.repeats):
        for method in suite.methods:
            own: list[tuple[PointKey, dict]] = []  # this method's points of the round, in its own order
            for i, spec in enumerate(suite.workloads):
                label = spec.label if labels[spec.label] == 1 else f"{spec.label}#{i}"
                common = dict(method=method, workload=spec, repeat=repeat, launch=launches.get(method))
                own += [(key(method, label, f"c{conc}", repeat), dict(concurrency=conc, **common))
                        for conc in suite.concurrency]  # fmt: skip
                own += [(key(method, label, rate_label(rate), repeat),  # open loop beside the closed loop
                         dict(concurrency=suite.max_concurrency or 0, request_rate=rate, **common))
                        for rate in suite.request_rate]  # fmt: skip
            own += [(key(method, tp.content, tp.label, repeat),  # a trace's replay pools every workload
                     dict(method=method, workload=suite.workloads[0], repeat=repeat, launch=launches.get(method),
                          concurrency=suite.max_concurrency or 0, trace=tp)) for tp in trace_points(suite)]  # fmt: skip
            cells += [(repeat, k, place[method], pk, fields) for k, (pk, fields) in enumerate(own)]
    if interleave:  # the method moves fastest
        cells.sort(key=lambda cell: cell[:3])
    return [GridPoint(point_key, index=n + 1, **fields) for n, (_, _, _, point_key, fields) in enumerate(cells)]


def load_plan(suite: Suite, dry_run: bool = False) -> dict[int, list[Request] | str]:
    """The requests of every workload (by index in ``suite.workloads``), read and sampled once. A dry run
    reads only what is on disk (generated prompts, ``data`` paths); for a Hub dataset it holds a line saying
    what a real run would load and from where instead."""
    from dflashbench.plan.order import stratified_order
    from dflashbench.workloads import hub_source, load_requests

    plan: dict[int, list[Request] | str] = {}
    for i, spec in enumerate(suite.workloads):
        source = hub_source(spec)
        if dry_run and source is not None:
            count = f"{spec.num_prompts} prompts" if spec.num_prompts else "every row"
            plan[i] = (f"a real run loads {source} from the Hugging Face Hub (or its cache; needs the 'datasets' "
                       f"package), {count}, max_tokens {spec.max_tokens}; give --data PATH to see the requests")  # fmt: skip
            continue
        requests = load_requests(spec, num_prompts=spec.num_prompts, seed=suite.seed, data=None)
        if not requests:
            raise UserError(f"workload {spec.label} yields no requests; check its categories and --num-prompts")
        if suite.precision is not None or suite.budget is not None:  # a point may stop after any prefix: each a fair sample
            requests = stratified_order(requests, suite.seed)
        plan[i] = requests
    return plan


def fill_streams(requests: list[Request], concurrency: int, per_stream: int) -> list[Request]:
    """At least ``concurrency x per_stream`` requests, so every stream runs several in turn and the steady
    window is most of the point: the workload's own, then its prompts again in order. A reuse is a new
    request id (``<id>~<k>``) with ``metadata["reuse"] = k``; prefix caches are reset between points, not
    inside one, so a reused prompt may hit the cache its first use filled (the report says so)."""
    want = concurrency * per_stream
    if len(requests) >= want:
        return requests
    out = list(requests)
    for i in range(len(requests), want):
        r, k = requests[i % len(requests)], i // len(requests)
        out.append(dataclasses.replace(r, id=f"{r.id}~{k}", metadata={**r.metadata, "reuse": k}))
    return out


def warmup_requests(requests: list[Request], n: int) -> list[Request]:
    """``n`` warm-up requests: the workload's own prompts (cycled), single turn, at most 32 tokens."""
    return [
        dataclasses.replace(r, id=f"warmup-{i}-{r.id}", followup_turns=(), max_tokens=min(r.max_tokens, WARMUP_MAX_TOKENS))
        for i, r in enumerate(requests[i % len(requests)] for i in range(n))
    ]  # fmt: skip
