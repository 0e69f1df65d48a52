"""Whether the client's own timings can be trusted: a reading of the client-load summary each point records
(``client``: processes, the busiest process's CPU share, the worst event-loop lag), made by the load generator
(:func:`dflashbench.load.loadgen_procs.client_overhead`), read here for the sweep's console and the report."""

from __future__ import annotations

BUSY_WARN_SHARE = 0.9  # a client process busier than this set the pace itself
LAG_WARN_GAP_SHARE = 0.5  # an event-loop lag p99 above this share of the gap between chunks blurs what is timed
IDLE_CLIENT_SHARE = 0.5  # a lagging loop in a process busy less than this is waiting for a CPU, not overloaded


def client_problem(client: dict | None, gap_s_p50: float | None = None) -> tuple[bool, str] | None:
    """Whether the client's own timings are suspect, and why: ``(True, line)`` when it may have set the pace
    itself (a process busy above :data:`BUSY_WARN_SHARE` of the point, or an event loop whose lag p99 exceeds
    half the point's gap between chunks while the process was busy); ``(False, line)`` when the loop lagged but
    the client was nearly idle, so the lag is a CPU shared with the server or other work: scheduling noise in the
    timestamps, not client overhead; ``None`` when neither.

    The lag is set against ``gap_s_p50``, the point's median gap between the chunks the client timestamps (ICL
    p50): what a late read blurs is a chunk's arrival. Against the per-token ITL (a chunk's gap ÷ its tokens) a
    speculative method, many tokens per chunk, would look blurred where AR, one token per chunk, would not, at the
    same lag on the same clock."""
    if not client:
        return None
    n = client.get("processes", 1)
    busy, lag = client.get("busy_share_max"), client.get("loop_lag_ms_p99")
    if busy is not None and busy >= BUSY_WARN_SHARE:
        return True, (f"the client was busy {busy:.0%} of the point on its busiest of {n} process(es): its timings "
                      "include client overhead; use more --client-processes")  # fmt: skip
    if lag is None or not gap_s_p50 or lag / 1e3 <= LAG_WARN_GAP_SHARE * gap_s_p50:
        return None
    said = (f"the client's event loop lagged {lag:.1f} ms (p99, worst of {n} process(es)) against a gap between "
            f"chunks (p50) of {gap_s_p50 * 1e3:.1f} ms")  # fmt: skip
    if busy is not None and busy < IDLE_CLIENT_SHARE:  # not the client's own load: it waited for a CPU
        return False, (f"{said}, while the client itself was only {busy:.0%} busy: the CPU is shared (with the "
                       "server or other work), so its timestamps carry scheduling noise that more client processes "
                       "would not remove")  # fmt: skip
    return True, f"{said}: its timings include client overhead; use more --client-processes"


def client_stopped(client: dict | None) -> str | None:
    """Why a point's figures measured a stop of its client rather than its server, else ``None``: a client process
    was continued (SIGCONT) during the point, so it had been stopped (Ctrl-Z, ``kill -STOP``) while the server went
    on: the requests in flight waited, unseen, and throughput and latencies carry the stop (a 20 s Ctrl-Z took 42 % off
    a point's throughput). The longest the event loop stood still is said with it."""
    if not client or not client.get("continued"):
        return None
    still = client.get("loop_lag_ms_max")
    held = f", its event loop standing still for up to {still / 1e3:.1f} s" if isinstance(still, int | float) else ""
    return (f"the client was stopped during the point (Ctrl-Z or SIGSTOP, continued {client['continued']} time(s)"
            f"{held}): its figures include the stop; dflashbench sweep --resume measures it again")

