"""Which CPUs a launched engine runs on, and which the client keeps for itself.

An engine that computes on the CPU takes every core it sees: vLLM's CPU build binds one OpenMP thread per core
(``VLLM_CPU_OMP_THREADS_BIND=auto``, vllm/utils/ompmultiprocessing.py) and spins on them. A client on the same
cores is then starved: in the first run of vLLM's CPU build here the client's event loop lagged 141 ms at p99 and
most requests' tokens arrived in one burst, so per-token latency could not be observed. Giving the engine its
own CPUs and the client the rest keeps the client's clock honest.

The sweep's ``engine_cpus`` setting (``--engine-cpus``):

- ``auto`` (default): split when the launched server computes on the CPU (the backend says so: vLLM's CPU
  build), and only then. The reference backend is left unsplit on purpose: its server is torch with intra-op
  threads, its figures are the project's history, and pinning it to half the cores would change them. A GPU
  engine computes on the GPU; its CPU work (API server, scheduler) is not pinned either.
- ``none``: never split.
- a CPU list (``0``, ``0-2``, ``0,2``): the launched engine runs on these, whatever the backend, and the
  client on the rest.
- a CPU list per server (``ar=0,dflash=1,eagle3=2``, a method's list running to the next ``name=``): each method's
  engine on its own cores, so the methods can run side by side (:mod:`dflashbench.plan.placement`); the client
  keeps the cores no engine has, and where every core is an engine's (two engines on a 2-core machine) it shares
  them, which the run records and says.

The client gets ``max(1, n // 8)`` of ``n`` CPUs (one on a 2-core machine), the engine the others: a client
process keeps up with about 128 streams (:data:`dflashbench.load.loadgen_procs.AUTO_STREAMS_PER_PROCESS`), while a
CPU engine's speed grows with every core it has. The split is recorded in the manifest (``cpus``) and shown on
the report's "measured on" line; a run whose client shared the engine's cores says so there.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence

from dflashbench.errors import UserError
from dflashbench.types import CpuPartition, format_cpu_list

CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``"0-2,5"`` -> ``(0, 1, 2, 5)``: the Linux cpu-list format (as ``taskset -c`` and vLLM's bind take)."""
    text = text.replace(" ", "")
    if not CPU_LIST.match(text):
        raise ValueError(f"not a CPU list: {text!r} (write e.g. 0, 0-2 or 0,2)")
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"not a CPU list: {text!r} ({part} runs backwards)")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def parse_server_cpus(text: str) -> dict[str, tuple[int, ...]] | None:
    """``"ar=0,dflash=1-2"`` -> ``{"ar": (0,), "dflash": (1, 2)}``: a CPU list per server, each running to the next
    ``name=``; ``None`` for a plain CPU list (no ``=``)."""
    if "=" not in text:
        return None
    out: dict[str, list[str]] = {}
    name = None
    for token in (t.strip() for t in text.replace(" ", "").split(",")):
        if "=" in token:
            name, _, token = token.partition("=")
            if not name or name in out:
                raise ValueError(f"not a CPU list per server: {text!r} ({name or 'a set'} named twice or unnamed; "
                                 "write e.g. ar=0,dflash=1)")  # fmt: skip
            out[name] = []
        if name is None:
            raise ValueError(f"not a CPU list per server: {text!r} (write e.g. ar=0,dflash=1)")
        out[name].append(token)
    return {n: parse_cpu_list(",".join(parts)) for n, parts in out.items()}


def check_setting(value: str) -> str:
    """A valid ``engine_cpus`` value (``auto``, ``none``, a CPU list or one per server), else ``ValueError``."""
    if value not in ("auto", "none") and parse_server_cpus(value) is None:
        parse_cpu_list(value)
    return value


def available_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on (its affinity mask: a container or ``taskset`` may allow fewer than
    the machine has)."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def client_share(n: int) -> int:
    """How many of ``n`` CPUs the client keeps when the engine computes on the CPU (see the module doc)."""
    return max(1, n // 8)


def plan_partition(setting: str, available: Sequence[int], *, engine_on_cpu: bool, launches: bool,
                   methods: Sequence[str] | None = None) -> CpuPartition:  # fmt: skip
    """The split for a sweep: ``launches`` (does it start its own server) and ``engine_on_cpu`` (does that
    server compute on the CPU) decide ``auto``; a CPU list is taken as given, checked against ``available``; a CPU
    list per server names only the run's ``methods`` (where given)."""
    available = tuple(sorted(available))

    def unsplit(reason: str) -> CpuPartition:
        return CpuPartition(available, (), available, setting, reason)

    if not launches:
        return unsplit("the server runs elsewhere: dflashbench launched none")
    if setting == "none":
        return unsplit("--engine-cpus none")
    if setting == "auto":
        if not engine_on_cpu:
            return unsplit("auto splits only for an engine that binds every core, vLLM's CPU build; "
                           "--engine-cpus LIST pins any")
        if len(available) < 2:
            return unsplit(f"only CPU {format_cpu_list(available)} is available: nothing to split")
        keep = client_share(len(available))
        return CpuPartition(available, available[:-keep], available[-keep:], setting,
                            "a CPU engine gets its own cores: --engine-cpus auto")  # fmt: skip
    servers = parse_server_cpus(setting)
    if servers is not None:
        if methods is not None:
            _check_methods(setting, servers, methods)
        return _per_server(setting, servers, available)
    engine = parse_cpu_list(setting)
    outside = sorted(set(engine) - set(available))
    if outside:
        raise UserError(f"--engine-cpus {setting}: CPU {format_cpu_list(outside)} is not available to this "
                        f"process (it may use {format_cpu_list(available)})")  # fmt: skip
    client = tuple(c for c in available if c not in engine)
    if not client:
        raise UserError(f"--engine-cpus {setting} leaves no CPU for the client (available: "
                        f"{format_cpu_list(available)}); leave at least one out, or use --engine-cpus none")  # fmt: skip
    return CpuPartition(available, engine, client, setting, f"--engine-cpus {setting}")


def _check_methods(setting: str, servers: dict[str, tuple[int, ...]], methods: Sequence[str]) -> None:
    """A CPU set kept for a method the run does not have would sit idle, taken from the client: refused, naming it."""
    extra = [name for name in servers if name not in methods]
    if extra:
        sets = ",".join(f"{name}={format_cpu_list(servers[name])}" for name in extra)
        kept = format_cpu_list(sorted({c for name in extra for c in servers[name]}))
        what = "is not a method" if len(extra) == 1 else "are not methods"
        raise UserError(f"--engine-cpus {setting}: {', '.join(extra)} {what} of this run (it runs "
                        f"{', '.join(methods)}), so CPU {kept} would be kept from the client for no server: drop "
                        f"{sets}, or add {', '.join(extra)} to --method")  # fmt: skip


def ignored_note(setting: str, *, launches: bool) -> str | None:
    """What to say where ``engine_cpus`` was set but means nothing: a run against a server someone else runs
    (``--endpoint``) launches none to pin, and its client runs on every CPU (``None`` for ``auto`` and ``none``: what
    such a run does anyway)."""
    if launches or setting in ("auto", "none"):
        return None
    return (f"--engine-cpus {setting} is ignored: with --endpoint dflashbench launches no server to pin, and the client "
            "runs on every CPU it may use; pin the running server where it is started (taskset -c LIST)")  # fmt: skip


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


@contextlib.contextmanager
def pinned(cpus: Sequence[int] | None) -> Iterator[None]:
    """Run the block with every thread of this process on ``cpus`` (``None``: as it is), then restore each
    thread's mask. Threads and processes started inside inherit it: the client's worker processes included.
    Linux sets affinity per thread, hence the walk over ``/proc/self/task``."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before: dict[int, set[int]] = {}
    for tid in _threads():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
    try:
        yield
    finally:
        for tid, mask in before.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, mask)


def _per_server(setting: str, servers: dict[str, tuple[int, ...]], available: tuple[int, ...]) -> CpuPartition:
    """Each server's own cores; the client on the cores left, or sharing them all where none is left."""
    engine = tuple(sorted({c for cpus in servers.values() for c in cpus}))
    outside = sorted(set(engine) - set(available))
    if outside:
        raise UserError(f"--engine-cpus {setting}: CPU {format_cpu_list(outside)} is not available to this process "
                        f"(it may use {format_cpu_list(available)})")  # fmt: skip
    client = tuple(c for c in available if c not in engine)
    if client:
        return CpuPartition(available, engine, client, setting, f"--engine-cpus {setting}", servers)
    return CpuPartition(available, engine, available, setting,
                        f"--engine-cpus {setting}: every core is an engine's, so the client shares them", servers)  # fmt: skip
