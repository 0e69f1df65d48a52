"""The slowdown within a point (issue #58 item 7): its last third's TPOT against its first third's, per request."""

from __future__ import annotations

import dataclasses

import numpy as np
from report.factory import request


def _point(tpots: list[float]) -> list:
    """Requests sent in this order, each decoding at its TPOT."""
    return [request("ar", 2, i, tpot_s=t, tokens=20) for i, t in enumerate(tpots)]


def test_a_steady_point_is_not_flagged_and_a_slowing_one_is():
    from dflashbench.measure.trend import slowdown, slowdown_line

    rng = np.random.default_rng(3)
    steady = slowdown(_point(list(0.010 * np.exp(rng.normal(0, 0.05, 30)))))
    assert steady is not None and not steady["slowed"] and abs(steady["change"]) < 0.1
    assert slowdown_line(steady) is None
    slowing = slowdown(_point([0.010 * (1 + 0.05 * i) for i in range(30)]))  # 5 % slower a request
    assert slowing["slowed"] and slowing["requests"] == 10 and slowing["change"] > 0.8 and slowing["p"] < 0.01
    assert slowdown_line(slowing).startswith("the server slowed down during the point: TPOT 12.2 ms over its first "
                                             "10 requests, 22.2 ms over its last (+82%")  # fmt: skip
    # faster at the end (a closed loop ramping down) is no slowdown
    assert not slowdown(_point([0.010 * (1 - 0.01 * i) for i in range(30)]))["slowed"]
    # a small drift, beyond noise but under 20 %, is not flagged
    assert not slowdown(_point([0.010 * (1 + 0.003 * i) for i in range(30)]))["slowed"]


def test_too_few_requests_or_unobservable_timing_are_said_not_read_as_steady():
    """A point too small to read says so (``slowed`` None, ``unread`` why), rather than nothing (issue #61)."""
    from dflashbench.measure.trend import (
        MIN_PART_REQUESTS,
        MIN_REQUESTS,
        slowdown,
        slowdown_line,
        unread_words,
    )

    small = slowdown(_point([0.01] * (3 * MIN_PART_REQUESTS - 1)))
    assert small == {"slowed": None, "unread": f"too few requests to read a trend (17 < {MIN_REQUESTS})",
                     "measured_requests": 17}  # fmt: skip
    assert unread_words(small) == "too few requests to read a trend (17 < 18)" and slowdown_line(small) is None
    assert slowdown([]) is None  # nothing measured: nothing to say
    rows = _point([0.010 * (1 + 0.05 * i) for i in range(30)])
    # the first 25 requests' tokens all arrived in one burst at their end: no per-token timing to read
    bursty = [dataclasses.replace(r, chunk_ns=(r.last_token_ns,) * 2, chunk_tokens=(1, r.output_tokens - 1))
              if i < 25 else r for i, r in enumerate(rows)]  # fmt: skip
    assert unread_words(slowdown(bursty)) == ("too few requests with per-token timing to read a trend (0 < 6 in a "
                                              "third of 10)")  # fmt: skip
    warm = [dataclasses.replace(r, warmup=True) for r in rows[:12]] + rows[12:]
    assert slowdown(warm)["requests"] == 6  # warm-up requests are no part of the point
    assert unread_words(slowdown(_point([0.01] * 30))) is None  # a point read says nothing of the kind
