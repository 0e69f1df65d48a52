"""Where each method's server runs, and which run at once (issue #55): the placement of a sweep.

A speedup is two points; every minute between them adds the machine's drift to its noise. So the methods of one
load are measured **in the same minutes**, the way the hardware allows:

- ``side`` (side by side): every method's server on its own devices (``tp`` GPUs each, ``CUDA_VISIBLE_DEVICES`` per
  server; or its own CPU cores, ``--engine-cpus ar=0,dflash=1``), all up for the round; at each load every
  method's point starts at the same moment. GPUs left over once every method has a server run **replicas** of the
  methods that take longest, each taking a later load of its method (never a share of one point's streams).
- ``turns`` (in turn): the servers share one device (the CPU, or GPUs that hold them all): each load's points go
  in turn, wave by wave (:mod:`dflashbench.run.turns`): at c=1 one request to each method in turn, at c streams a
  wave of c requests. Their points share the same minutes without sharing the device at once.
- ``point``: every server up, each load's points one after another (point by point, what ``--interleave on``
  was before this issue; ``on`` still means it).
- ``off``: one method's server at a time, all its points, then the next.

``auto`` (the default) picks ``side`` where every method gets its own devices (enough GPUs for a server of ``tp``
GPUs per method, or a CPU set per method given), ``turns`` where the launched servers compute on the CPU, and
``off`` for a GPU engine whose GPUs hold fewer servers than methods (each server sizes its memory to its GPUs).
Where the GPUs hold two or more servers but not one per method, ``side`` runs in **stages** (issue #63): AR and
DFlash first where they fit together, each stage's servers side by side, then the next stage's on the same GPUs
(:attr:`Placement.stages`); a stage's points are paired only with its own.

A point whose load is an arrival rate (``--request-rate``) or a trace (``--trace``) keeps its own clock, so it is
never sent in turns (issue #65): a wave waits for the one before it, and a replay sent that way follows the
server's pace, not the schedule. Where the placement is ``turns`` those points go point by point (every server up,
the methods one after another, the speed probe read before each: :attr:`Placement.open_loop_mode`); a grid of
nothing else is placed ``point``; ``--interleave turns`` with them is refused, naming ``point`` and ``side``.

GPU sets come from the topology where NVML can read it: a server's ``tp`` GPUs are chosen to share NVLink (NVML's
P2P status over NVLink), else the nearest common ancestor (a PCIe switch, a host bridge, a NUMA node: NVML's
``nvmlGpuTopologyLevel_t``, ``NVML_TOPOLOGY_SINGLE`` 10 ... ``NVML_TOPOLOGY_NODE`` 40 "same NUMA node",
``NVML_TOPOLOGY_SYSTEM`` 50, https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceEnumvs.html and
nvmlDeviceGetTopologyCommonAncestor, https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html).
Where it cannot be read (a dry run with ``--gpu``, no NVML), the GPUs are numbered 0..n-1 and taken in order, and
the placement says so. Servers get ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` beside ``CUDA_VISIBLE_DEVICES``, so CUDA
numbers the GPUs as NVML does (its default order is "fastest first": CUDA C Programming Guide, "CUDA Environment
Variables", https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars).

With ``--repeats`` the methods move over the GPU sets from round to round (:meth:`Placement.for_round`), so one
set's own speed cancels out of the speedups over the rounds.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dflashbench.errors import UserError
from dflashbench.types import Method, format_cpu_list

MODES = ("auto", "side", "turns", "point", "off")
ALIASES = {"on": "point"}  # --interleave on, before issue #55: every server up, point by point
NVLINK = 0  # a pair of GPUs that talk over NVLink: closer than any PCIe level
UNKNOWN = 50  # NVML_TOPOLOGY_SYSTEM: as far apart as two GPUs of one machine get
MAX_SETS_SEARCHED = 20_000  # tp-subsets tried per server before falling back to index order


def check_mode(value: str) -> str:
    """A valid ``interleave`` setting, aliases resolved; ``ValueError`` otherwise."""
    value = ALIASES.get(value, value)
    if value not in MODES:
        raise ValueError(f"interleave {value!r}: expected one of {', '.join(MODES)} (on: point)")
    return value


# --- the machine's GPUs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Topology:
    """The GPUs a run may use (NVML indices) and how close each pair is: 0 over NVLink, else NVML's common-ancestor
    level (10 one PCIe switch ... 40 one NUMA node, 50 across the system)."""

    gpus: tuple[int, ...]
    levels: Mapping[tuple[int, int], int] = field(default_factory=dict)
    source: str = ""

    def distance(self, a: int, b: int) -> int:
        return 0 if a == b else self.levels.get((min(a, b), max(a, b)), UNKNOWN)

    @property
    def read(self) -> bool:
        return bool(self.levels)


def assumed_topology(count: int, why: str) -> Topology:
    gpus = f"GPUs 0-{count - 1}" if count > 1 else "GPU 0"
    return Topology(tuple(range(count)), {}, f"assumed: {gpus}, topology not read ({why}); sets in index order")


def read_topology(nvml=None) -> Topology | None:
    """The visible GPUs and their pairwise distance from NVML; ``None`` without NVML or a GPU."""
    import os

    from dflashbench.telemetry import nvml_session, visible_handles

    with nvml_session(nvml) as nvml:
        if nvml is None:
            return None
        try:
            return _topology_of(nvml, visible_handles(nvml, os.environ.get("CUDA_VISIBLE_DEVICES")))
        except Exception:  # noqa: BLE001
            return None


def _topology_of(nvml, handles) -> Topology | None:
    """Each pair's distance: NVLink where NVML says so, else its common-ancestor (PCIe/NUMA) level."""
    if not handles:
        return None
    nvlink_cap = getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
    status_ok = getattr(nvml, "NVML_P2P_STATUS_OK", 0)
    levels: dict[tuple[int, int], int] = {}
    for (i, a), (j, b) in itertools.combinations(handles, 2):
        key = (min(i, j), max(i, j))
        try:
            if nvml.nvmlDeviceGetP2PStatus(a, b, nvlink_cap) == status_ok:
                levels[key] = NVLINK
                continue
        except Exception:  # noqa: BLE001 - no NVLink query on this driver: the PCIe level decides
            pass
        try:
            levels[key] = int(nvml.nvmlDeviceGetTopologyCommonAncestor(a, b))
        except Exception:  # noqa: BLE001 - unknown pair: counted as across the system
            pass
    source = ("NVML: NVLink P2P status and common-ancestor level of each pair" if levels else
              "NVML: the GPUs, but no pair's topology (sets in index order)")  # fmt: skip
    return Topology(tuple(i for i, _ in handles), levels, source)


def _spread(topology: Topology, gpus: Sequence[int]) -> tuple[int, int]:
    pairs = [topology.distance(a, b) for a, b in itertools.combinations(gpus, 2)]
    return (max(pairs, default=0), sum(pairs))


def closest(topology: Topology, free: Sequence[int], size: int) -> tuple[int, ...]:
    """The closest set of ``size`` GPUs among ``free``: its farthest pair, then the sum of its pairs, then the lowest
    indices (NVLink before one PCIe switch before one NUMA node before the system); index order where the topology
    was not read or the search would be too long."""
    if not topology.read or size == 1 or math.comb(len(free), size) > MAX_SETS_SEARCHED:
        return tuple(free[:size])
    return min(itertools.combinations(free, size), key=lambda s: (_spread(topology, s), s))


def carve(topology: Topology, sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Disjoint GPU sets of ``sizes`` (one per server, in order), each the closest set left; as many as fit."""
    free = list(topology.gpus)
    sets: list[tuple[int, ...]] = []
    for size in sizes:
        if len(free) < size:
            break
        chosen = closest(topology, free, size)
        sets.append(chosen)
        free = [g for g in free if g not in chosen]
    return sets


# --- the placement -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """One launched server: its method, which of that method's servers it is (0: the first; 1..: replicas on spare
    GPUs), and its devices (GPUs, or a CPU engine's own cores; none where it shares the device)."""

    method: Method
    replica: int = 0
    gpus: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()  # on a cluster: the node slots it has to itself (the scheduler picks the machines)

    @property
    def name(self) -> str:
        """``ar``, ``ar#2``: what its manifest record, its log and the placement table call it."""
        return self.method.value if self.replica == 0 else f"{self.method.value}#{self.replica + 1}"

    def devices(self) -> str:
        if self.nodes:
            return f"node {self.nodes[0]}" if len(self.nodes) == 1 else f"nodes {format_cpu_list(self.nodes)}"
        if self.gpus:
            return f"GPU {','.join(map(str, self.gpus))}"
        if self.cpus:
            return f"CPU {format_cpu_list(self.cpus)}"
        return "shared"

    def env(self) -> dict[str, str]:
        """What the server's environment gets: its GPUs, numbered as NVML numbers them."""
        if not self.gpus:
            return {}
        return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(map(str, self.gpus))}


@dataclass(frozen=True)
class Placement:
    mode: str  # side | turns | point | off
    servers: tuple[Server, ...]
    why: str
    device: str = ""  # "8 x H100", "CPU"
    spare: tuple[int, ...] = ()  # GPUs no server uses
    topology: str = ""  # where the GPU sets came from, or what was assumed
    notes: tuple[str, ...] = ()
    stages: tuple[tuple[Method, ...], ...] = ()  # side by side in stages: each stage's servers up, then the next's

    def stage_of(self, method: Method) -> tuple[Method, ...]:
        """The methods up beside ``method`` (every method where there is one stage)."""
        return next((w for w in self.stages if method in w), tuple(dict.fromkeys(s.method for s in self.servers)))

    def in_stages(self, methods: Sequence[Method]) -> list[tuple[Method, ...]]:
        """``methods`` by stage, in the order they run: the stage of ``methods[0]`` first (the sweep passes its launch
        order, the tightest server first), the others as placed; one group where there are no stages."""
        if not self.stages:
            return [tuple(methods)]
        groups = [tuple(m for m in w if m in methods) for w in self.stages]
        first = min(range(len(groups)), key=lambda i: min((methods.index(m) for m in groups[i]), default=math.inf))
        return [g for g in [groups[first], *groups[:first], *groups[first + 1:]] if g]

    @property
    def open_loop_mode(self) -> str:
        """How a rate or trace point's methods run: as placed, except never in turns (module docstring): a schedule
        sent wave by wave would follow the server's pace, so in turns they go one after another."""
        return "point" if self.mode == "turns" else self.mode

    @property
    def together(self) -> bool:
        """Every server up for the round (side, turns, point); else one method's at a time."""
        return self.mode != "off"

    def of(self, method: Method) -> list[Server]:
        return [s for s in self.servers if s.method is method]

    def first(self, method: Method) -> Server:
        return self.of(method)[0]

    def count(self, method: Method) -> int:
        return len(self.of(method))

    def for_round(self, repeat: int) -> Placement:
        """Round ``repeat``'s placement: side by side, every server moves ``repeat`` GPU (or CPU) sets along, so over
        the rounds each method is measured on every set and a set's own speed cancels out of the speedups."""
        if self.mode != "side" or repeat == 0 or len(self.servers) < 2 or any(s.nodes for s in self.servers):
            return self  # on a cluster's nodes each round's servers are new jobs, on the machines the scheduler picks
        moved = {}
        for stage in self.stages or (tuple(dict.fromkeys(s.method for s in self.servers)),):
            servers = [s for s in self.servers if s.method in stage]  # in stages, a stage's sets move among its own
            sets = [(s.gpus, s.cpus) for s in servers]
            k = repeat % len(sets)
            moved.update({s: Server(s.method, s.replica, *sets[(i + k) % len(sets)]) for i, s in enumerate(servers)})
        return dataclasses.replace(self, servers=tuple(moved[s] for s in self.servers))

    def table(self) -> list[str]:
        """The placement as the dry run prints it: server, devices, what runs beside it."""
        head = f"placement: {self.mode} ({self.why})"
        if not self.servers:
            return [head]
        rows = [("server", "devices", "beside it")]
        for s in self.servers:
            if s.replica:
                continue
            if self.mode == "side":
                stage = self.stage_of(s.method)
                others = [o.method.value for o in self.servers if o.replica == 0 and o.method is not s.method
                          and o.method in stage]  # fmt: skip
                beside = f"{', '.join(others)}: a load's points start together" if others else "alone (its stage)"
                if self.stages:
                    beside = f"stage {next(i for i, w in enumerate(self.stages) if s.method in w) + 1}: {beside}"
            elif self.mode == "turns":
                beside = "the others, in turn (a wave each)"
            elif self.mode == "point":
                beside = "the others up, points one after another"
            else:
                beside = "nothing (one method's server at a time)"
            rows.append((s.name, s.devices(), beside))
        w0, w1 = (max(len(r[i]) for r in rows) for i in (0, 1))
        out = [head, *(f"  {a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows)]
        replicas = [s for s in self.servers if s.replica]
        if replicas:
            out.append("  replicas, each taking a later load of its method: "
                       + ", ".join(f"{s.name} {s.devices()}" for s in replicas))  # fmt: skip
        if self.spare and self.mode == "side":  # one method at a time: its why says the GPUs hold too few servers
            out.append(f"  spare GPUs {','.join(map(str, self.spare))}: fewer than one server's tp")
        if self.topology:
            out.append(f"  GPU sets: {self.topology}")
        out += [f"  note: {n}" for n in self.notes]
        return out

    def record(self) -> dict:
        """What the manifest keeps (``placement``)."""
        return {"mode": self.mode, "open_loop_mode": self.open_loop_mode, "why": self.why, "device": self.device,
                "topology": self.topology,
                "servers": [{"name": s.name, "method": s.method.value, "replica": s.replica, "gpus": list(s.gpus),
                             "cpus": list(s.cpus), **({"nodes": list(s.nodes)} if s.nodes else {})}
                            for s in self.servers],
                "spare": list(self.spare), "notes": list(self.notes),
                **({"stages": [[m.value for m in w] for w in self.stages]} if self.stages else {})}  # fmt: skip


def _replicas(methods: Sequence[Method], spare: int, tps: Mapping[Method, int],
              weights: Mapping[Method, float] | None) -> list[Method]:  # fmt: skip
    """Which method each replica serves, while ``spare`` GPUs hold one more of its tp: the one whose points take
    longest per server (``weights``, seconds; equal where unknown), again and again."""
    count = dict.fromkeys(methods, 1)
    weight = {m: (weights or {}).get(m, 1.0) for m in methods}
    out = []
    while True:
        fitting = [m for m in methods if tps[m] <= spare]
        if not fitting:
            return out
        m = max(fitting, key=lambda x: (weight[x] / count[x], -methods.index(x)))
        count[m] += 1
        spare -= tps[m]
        out.append(m)


def place_gpus(methods: Sequence[Method], tp: int | Mapping[Method, int], topology: Topology, setting: str = "auto",
               *, label: str = "GPU", weights: Mapping[Method, float] | None = None,
               replicas: bool = True) -> Placement:  # fmt: skip
    """A GPU engine's placement: side by side where the GPUs hold a server per method (``tp``: the memory plan's,
    one for all or per method), spare GPUs running replicas of the methods whose points take longest (``weights``,
    seconds); else one method's server at a time."""
    setting = check_mode(setting)
    tps = {m: tp[m] if isinstance(tp, Mapping) else tp for m in methods}
    n = len(topology.gpus)
    device = f"{n} x {label}"
    need = sum(tps.values())
    shown_tp = f"tp {tps[methods[0]]}" if len(set(tps.values())) == 1 else \
        "tp " + ", ".join(f"{m.value} {t}" for m, t in tps.items())  # fmt: skip
    if setting in ("auto", "side") and need <= n and len(methods) > 1:
        owners = list(methods) + (_replicas(methods, n - need, tps, weights) if replicas else [])
        sets = carve(topology, [tps[m] for m in owners])
        seen: dict[Method, int] = {}
        servers = []
        for method, gpus in zip(owners, sets, strict=True):
            servers.append(Server(method, seen.get(method, 0), gpus))
            seen[method] = seen.get(method, 0) + 1
        used = {g for s in sets for g in s}
        extra = len(sets) - len(methods)
        why = (f"{len(methods)} servers of {shown_tp} on {device}" + (f" + {extra} replica(s)" if extra else "")
               + "; a load's points start together")  # fmt: skip
        return Placement("side", tuple(servers), why, device, tuple(g for g in topology.gpus if g not in used),
                         topology.source)  # fmt: skip
    stages = _stages(methods, tps, n) if setting == "auto" and len(methods) > 1 else []
    if len(stages) > 1 and len(stages[0]) > 1:  # the GPUs hold two or more servers, not one per method: in stages
        return _place_stages(methods, stages, tps, topology, device, shown_tp, weights if replicas else None,
                            replicas)  # fmt: skip
    if setting == "side":
        raise UserError(f"--interleave side needs a server per method on GPUs of its own ({need} GPUs at {shown_tp}), "
                        f"and {device} has {n}; use --interleave off (one method at a time) or fewer methods")  # fmt: skip
    widest = max(tps.values())
    gpus = tuple(topology.gpus[:widest])
    servers = tuple(Server(m, 0, gpus[:tps[m]]) for m in methods)
    if setting == "auto":
        why = (f"{device} holds fewer servers of {shown_tp} than the {len(methods)} methods: one method's server at a "
               "time" if len(methods) > 1 else "one method")  # fmt: skip
        return Placement("off", servers, why, device, topology.gpus[widest:], topology.source)
    why = {"turns": "every server on the same GPUs, each load's points in turn, wave by wave (--interleave turns: "
                    "the memory plan must leave room for them all)",
           "point": "every server on the same GPUs, each load's points one after another (--interleave point)",
           "off": "one method's server at a time (--interleave off)"}[setting]  # fmt: skip
    return Placement(setting, servers, why, device, topology.gpus[widest:], topology.source)


def _stages(methods: Sequence[Method], tps: Mapping[Method, int], n: int) -> list[tuple[Method, ...]]:
    """Methods grouped into stages whose servers fit ``n`` GPUs at once: AR first, then DFlash (the comparison the
    sweep is for), then the rest in the suite's order, each into the first stage with room (first fit)."""
    ranked = sorted(methods, key=lambda m: (m is not Method.AR, not m.value.startswith("dflash"), methods.index(m)))
    stages: list[list[Method]] = []
    for m in ranked:
        room = next((w for w in stages if sum(tps[x] for x in w) + tps[m] <= n), None)
        if room is None:
            stages.append([m])
        else:
            room.append(m)
    return [tuple(sorted(w, key=methods.index)) for w in stages]


def _place_stages(methods: Sequence[Method], stages: list[tuple[Method, ...]], tps: Mapping[Method, int],
                 topology: Topology, device: str, shown_tp: str, weights: Mapping[Method, float] | None,
                 replicas: bool) -> Placement:  # fmt: skip
    """Side by side in stages: each stage's servers (and replicas on the GPUs it leaves) carved from every GPU, one
    stage after another."""
    n = len(topology.gpus)
    servers: list[Server] = []
    used: set[int] = set()
    for stage in stages:
        need = sum(tps[m] for m in stage)
        owners = list(stage) + (_replicas(stage, n - need, tps, weights) if replicas else [])
        seen: dict[Method, int] = {}
        for method, gpus in zip(owners, carve(topology, [tps[m] for m in owners]), strict=True):
            servers.append(Server(method, seen.get(method, 0), gpus))
            seen[method] = seen.get(method, 0) + 1
            used.update(gpus)
    order = {m: i for i, m in enumerate(methods)}
    servers.sort(key=lambda s: (order[s.method], s.replica))
    shown = ", then ".join(" + ".join(m.value for m in w) for w in stages)
    why = (f"{device} holds {max(len(w) for w in stages)} of the {len(methods)} servers of {shown_tp} at once: "
           f"{shown}, each stage side by side, then stopped")  # fmt: skip
    return Placement("side", tuple(servers), why, device, tuple(g for g in topology.gpus if g not in used),
                     topology.source, (), tuple(stages))  # fmt: skip


# What changes when the methods are spread over a cluster's nodes (issue #67), said where the placement is printed.
NODES_WHY = ("on a cluster each server has its node(s) to itself (Slurm --exclusive, a Kubernetes pod anti-affinity): "
             "side by side the methods share no GPU, PCIe switch or CPU, only the network and the client, which the "
             "interference probe still measures before the first round; the scheduler picks the machines, so rounds "
             "move no server between node slots (each round's servers are new jobs, their nodes recorded)")


def place_nodes(methods: Sequence[Method], nodes: Mapping[Method, int], available: int, setting: str = "auto", *,
                label: str = "node", weights: Mapping[Method, float] | None = None) -> Placement:  # fmt: skip
    """Servers on a cluster's nodes, each on node(s) of its own (``nodes``: how many each method's server spans; a
    server of a node's GPUs or fewer takes one): side by side where ``available`` nodes hold a server per method,
    spare nodes running replicas of the methods that take longest; in stages where they hold some at once; else one
    method's server at a time. The node slots are the plan's count, not machines: the scheduler picks those."""
    slots = Topology(tuple(range(available)), {}, "node slots: the scheduler picks the machines")
    placed = place_gpus(methods, nodes, slots, setting, label=label, weights=weights)
    servers = tuple(Server(s.method, s.replica, (), (), s.gpus) for s in placed.servers)
    return dataclasses.replace(placed, servers=servers, topology="", spare=placed.spare,
                               why=placed.why.replace(f"tp {nodes[methods[0]]}", f"{nodes[methods[0]]} node(s)"),
                               notes=(*placed.notes, NODES_WHY))  # fmt: skip


def place_cpu(methods: Sequence[Method], setting: str = "auto", cpu_sets: Mapping[Method, tuple[int, ...]] | None = None,
              client: tuple[int, ...] = ()) -> Placement:  # fmt: skip
    """Servers that compute on the CPU: side by side where each method has its own cores (``cpu_sets``, from
    ``--engine-cpus ar=0,dflash=1``), else in turn on the shared CPU."""
    setting = check_mode(setting)
    sets = dict(cpu_sets or {})
    if sets:
        missing = [m.value for m in methods if m not in sets]
        if missing:
            raise UserError(f"--engine-cpus names no CPUs for {', '.join(missing)}: give each method its own set "
                            f"(e.g. {','.join(f'{m.value}={i}' for i, m in enumerate(methods))}) or one set for all")  # fmt: skip
        for (a, ca), (b, cb) in itertools.combinations(sets.items(), 2):
            if set(ca) & set(cb) and setting in ("auto", "side"):
                raise UserError(f"--engine-cpus: {a.value} and {b.value} share CPU {format_cpu_list(sorted(set(ca) & set(cb)))}; "
                                "side by side needs disjoint sets (or --interleave turns on shared cores)")  # fmt: skip
    if setting == "side" and not sets:
        raise UserError("--interleave side on the CPU needs a CPU set per method: --engine-cpus ar=0,dflash=1,...")
    mode = "side" if setting == "auto" and sets and len(methods) > 1 else ("turns" if setting == "auto" else setting)
    if len(methods) < 2 and setting == "auto":
        mode = "off"
    servers = tuple(Server(m, 0, (), tuple(sets.get(m, ()))) for m in methods)
    notes = []
    if sets and client and set(client) & {c for s in sets.values() for c in s}:
        notes.append(f"the client shares CPU {format_cpu_list(client)} with an engine: every core is an engine's, "
                     "so the client's timing shares one (on 2 cores, unavoidable)")  # fmt: skip
    why = {"side": "each method's engine on its own cores, a load's points started together",
           "turns": "the servers share the CPU: each load's points in turn, wave by wave",
           "point": "every server up, each load's points one after another",
           "off": "one method's server at a time"}[mode]  # fmt: skip
    return Placement(mode, servers, why, "CPU", (), "", tuple(notes))


def place_endpoint(methods: Sequence[Method]) -> Placement:
    return Placement("off", (), "a running server (--endpoint): nothing launched, nothing placed", "")


# --- time ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """When each cell (a load's points, one per method) starts, and when the last point ends."""

    starts_s: tuple[float, ...]
    end_s: float


def simulate(cells: Sequence[Mapping[Method, float]], servers: Mapping[Method, int]) -> Schedule:
    """The side-by-side schedule of ``cells`` (each: method -> seconds of its point) on ``servers`` per method: a
    cell starts once a server of every one of its methods is free (and never before the cell before it), all its
    points at that moment; each point holds its server until it ends. What :mod:`dflashbench.run.side` does."""
    free = {m: [0.0] * max(n, 1) for m, n in servers.items()}
    last, starts = 0.0, []
    for cell in cells:
        start = max([last, *(min(free[m]) for m in cell)])
        for m, seconds in cell.items():
            slot = free[m].index(min(free[m]))
            free[m][slot] = start + seconds
        starts.append(start)
        last = start
    end = max((t for slots in free.values() for t in slots), default=0.0)
    return Schedule(tuple(starts), end)


def side_seconds(cells: Sequence[Mapping[Method, float]], placement: Placement) -> float:
    """A side-by-side round's seconds: :func:`simulate` on the servers placed, stage after stage where the GPUs run
    the methods in stages (each stage's cells hold its own methods' points)."""
    servers = {m: max(placement.count(m), 1) for c in cells for m in c}
    total = 0.0
    for stage in placement.in_stages(list(servers)):
        part = [{m: t for m, t in c.items() if m in stage} for c in cells]
        total += simulate([c for c in part if c], {m: servers[m] for m in stage}).end_s
    return total


# --- a sweep's placement ------------------------------------------------------------------------------------------


# Why a rate or trace point's methods go one after another where the others go in turn (module docstring).
CLOCK_WHY = ("rate and trace points keep their arrival schedule: every server up, each load's points one after "
             "another, the speed probe read before each (in turn, each request would wait for the one before)")


def refuse_turns(setting: str, *, open_loop: bool) -> None:
    """``--interleave turns`` on a grid with rate or trace points (``open_loop``): refused, naming what keeps the
    schedule."""
    if open_loop and check_mode(setting) == "turns":
        raise UserError("--interleave turns sends a load's requests wave by wave, each wave waiting for the one "
                        "before, so a rate (--request-rate) or a trace (--trace) would follow the server's pace, not "
                        "its schedule: use --interleave point (every server up, the methods one after another, the "
                        "speed probe measuring the drift between them) or --interleave side (each method on its own "
                        "GPUs or cores, e.g. --engine-cpus ar=0,dflash=1); auto sends closed-loop points in turn and "
                        "rate and trace points point by point")  # fmt: skip


def keep_clock(placement: Placement, *, closed_loop: bool, open_loop: bool) -> Placement:
    """``placement`` for a grid with rate or trace points (``open_loop``): in turns, a grid of nothing else is placed
    ``point``; a grid of both keeps ``turns`` for its closed-loop points and says that the others go point by point
    (:attr:`Placement.open_loop_mode`)."""
    if not open_loop or placement.mode != "turns":
        return placement
    if not closed_loop:
        return dataclasses.replace(placement, mode="point", why=CLOCK_WHY)
    return dataclasses.replace(placement, notes=(*placement.notes, CLOCK_WHY))


def plan_placement(methods: Sequence[Method], setting: str, *, launches: bool, on_gpu: bool,
                   tp: int | Mapping[Method, int], gpu=None,
                   dry_run: bool = False, cpus=None, weights: Mapping[Method, float] | None = None,
                   topology: Topology | None = None, closed_loop: bool = True,
                   open_loop: bool = False, cluster: str = "local",
                   nodes: Mapping[Method, int] | None = None) -> Placement:  # fmt: skip
    """A sweep's placement: nothing for a running server (``launches`` False); the CPU's (``cpus``: a
    :class:`~dflashbench.types.CpuPartition`, per-server sets included) for servers that compute there; else the
    GPUs' (``gpu``: the :class:`~dflashbench.plan.gpus.GpuPlan`): read from NVML where it sees them (``topology``
    given: a test's), numbered and assumed for a dry run's ``--gpu`` or the assumed GPU. ``closed_loop`` and
    ``open_loop``: whether the grid has closed-loop points, and rate or trace points (never in turns:
    :func:`refuse_turns`, :func:`keep_clock`)."""
    refuse_turns(setting, open_loop=open_loop)
    if launches and on_gpu and gpu is not None and (cluster != "local" or getattr(gpu, "nodes", 1) > 1):
        # a cluster's GPU servers: by node, each on its own (``cluster``: the launcher's kind; ``nodes``: how many
        # each method's server spans, the memory plan's)
        per = {m: (nodes or {}).get(m, 1) for m in methods}
        shape = f"node of {gpu.count or ''} x {gpu.label}".replace("of  x", "of")
        placed = place_nodes(methods, per, max(getattr(gpu, "nodes", 1), 1), setting, label=shape, weights=weights)
        return keep_clock(placed, closed_loop=closed_loop, open_loop=open_loop)
    placed = _plan_placement(methods, setting, launches=launches, on_gpu=on_gpu, tp=tp, gpu=gpu, dry_run=dry_run,
                             cpus=cpus, weights=weights, topology=topology)  # fmt: skip
    return keep_clock(placed, closed_loop=closed_loop, open_loop=open_loop)


def _plan_placement(methods: Sequence[Method], setting: str, *, launches: bool, on_gpu: bool,
                    tp: int | Mapping[Method, int], gpu, dry_run: bool, cpus, weights: Mapping[Method, float] | None,
                    topology: Topology | None) -> Placement:  # fmt: skip
    from dflashbench.plan.gpus import gpus_per_node

    if not launches:
        return place_endpoint(methods)
    if not on_gpu:
        try:
            sets = {Method.parse(k): v for k, v in (getattr(cpus, "servers", None) or {}).items()}
        except ValueError as exc:
            raise UserError(f"--engine-cpus: {exc}") from None
        return place_cpu(methods, setting, sets, tuple(getattr(cpus, "client", ()) or ()))
    label = gpu.label if gpu is not None else "GPU"
    if topology is None:
        origin = gpu.origin if gpu is not None else "assumed"
        if origin == "nvml":
            topology = read_topology()
        elif gpu is not None:
            count = gpu.count or gpus_per_node(gpu.label)
            why = "--gpu on a dry run" if origin == "--gpu" else "no GPU visible: one node of the assumed GPU"
            topology = assumed_topology(count, why) if dry_run or origin == "--gpu" else None
    if topology is None:  # a real run whose GPUs NVML cannot read: leave them to the engine, one server at a time
        servers = tuple(Server(m) for m in methods)
        return Placement("off", servers, "the GPUs could not be read (NVML): one method's server at a time, on the "
                         "GPUs the engine sees", label)  # fmt: skip
    return place_gpus(methods, tp, topology, setting, label=label, weights=weights)
