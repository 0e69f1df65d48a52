"""The report's "Draft length" section, from a hand-made run: a method at two Ks and two loads, and a tuned arm beside
the method; absent from a report without them."""

from __future__ import annotations

import dataclasses

from dflashbench.report import load_model, render_model
from report.factory import point, request, write_run

RATES = (0.8, 0.6, 0.45, 0.3)  # the drafter's per-position acceptance


def spec_requests(method: str, c: int, tpot_s: float, tau: float, offset: int):
    out = []
    for i in range(6):
        r = request(method, c, offset + i, tpot_s=tpot_s, tokens=30)
        steps = 10
        out.append(dataclasses.replace(r, spec_verify_steps=steps, spec_accepted_tokens=round((tau - 1) * steps)))
    return out


def test_the_section_reads_a_method_at_several_ks_and_its_tuned_schedule(tmp_path):
    points, requests, n = [], [], 0
    for k in (1, 4):
        tau = 1 + sum(RATES[:k])
        for c in (1, 2):
            step = 2e-3 + 5e-4 * c * k
            per_user = tau / step
            points.append(point(f"dflash-k{k}", c, per_user, per_user * c * 0.9, tau=tau,
                                accepted_per_pos_rate=RATES[:k]))  # fmt: skip
            requests += spec_requests(f"dflash-k{k}", c, 1 / per_user, tau, n)
            n += 10
    for method, rate in (("dflash", 400.0), ("dflash-tuned", 440.0)):  # the same prompts: paired
        for c in (1, 2):
            points.append(point(method, c, rate, rate * c, tau=2.5, accepted_per_pos_rate=RATES[:3]))
            requests += spec_requests(method, c, 1 / rate, 2.5, 100 * c)
    run = write_run(tmp_path, points, requests)
    model = load_model([run])
    (section,) = [s for s in model.sections if s.id == "draft-length"]
    titles = [t.title for t in section.tables]
    assert titles == ["dflash: the best K per load (per user)", "dflash: prediction against points it did not fit",
                      "tau three ways", "Tuned schedule over the fixed K, measured side by side"]  # fmt: skip
    held = section.tables[1]
    assert len(held.rows) == 4 and all(row[4].endswith("%") for row in held.rows)
    gains = section.tables[3]
    assert [row[:3] for row in gains.rows] == [["1", "dflash-tuned", "dflash"], ["2", "dflash-tuned", "dflash"]]
    assert gains.rows[0][3].startswith("1.100") and gains.rows[0][5] == "ok"
    assert section.figures and section.figures[0].title == "draft length — dflash"
    assert "recommended schedule" in section.lines[0]
    order = [s.id for s in model.sections]
    assert order.index("draft-length") == order.index("why") + 1 if "why" in order else True
    assert "Draft length" in render_model(model, "html")


def test_no_section_without_a_method_at_two_ks(tmp_path):
    run = write_run(tmp_path, [point("ar", 1, 100, 100), point("dflash", 1, 300, 300, tau=3.0)])
    assert not [s for s in load_model([run], with_figures=False).sections if s.id == "draft-length"]
