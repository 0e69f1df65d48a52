"""Issue #53 "Pairs stay pairs": every ratio of two methods is read on the prompts both ran, paired by (prompt id,
occurrence); accuracy and agreement too; a load's points sized by precision stop together (the later ones send the
first one's prefix of the one seeded order); the report says how each point was sized and what it reached."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from types import SimpleNamespace

from dflashbench.measure import metrics, noise, readings
from dflashbench.report import write_report
from dflashbench.run.point import keep_load, load_prefix, precision_watch
from dflashbench.run.store import load_run
from dflashbench.types import Method, Request, RequestResult

from . import mdtables

ROOT = Path(__file__).resolve().parents[2]
VLLM = ROOT / "results" / "examples" / "demo-20261125-024540-6b40"


def _cut(tmp_path: Path, method: str, c: int, keep: int) -> Path:
    """The vLLM CPU example with ``method``'s point at ``c`` stopped after its first ``keep`` requests, as a point
    sized by precision stopped before the change (EAGLE-3 at 22 of AR's 32 in the default run)."""
    run = tmp_path / "cut"
    shutil.copytree(VLLM, run)
    rows = [json.loads(ln) for ln in (run / "requests.jsonl").read_text().splitlines()]
    pid = f"vllm:{method}:synthetic:c{c}"
    measured = [r for r in rows if r["point_id"] == pid and not r.get("warmup")]
    gone = {r["request_id"] for r in measured[keep:]}
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows
                                                if not (r["point_id"] == pid and r["request_id"] in gone)))
    return run


def test_a_speedup_reads_the_prompts_both_ran_not_two_means_over_different_prompts(tmp_path):
    run_dir = _cut(tmp_path, "eagle3", 4, 22)
    run = load_run(run_dir)
    rs = [RequestResult.from_dict(r) for r in run.requests.to_dict("records")]
    side = {m: {r.request_id: r for r in rs if r.point_id == f"vllm:{m}:synthetic:c4" and not r.warmup and r.ok}
            for m in ("ar", "eagle3")}  # fmt: skip
    common = [i for i in side["ar"] if i in side["eagle3"]]  # in stored order, as the bootstrap draws them
    assert len(common) == 22 and len(side["ar"]) == 32

    def pooled(m: str, ids) -> float:
        return metrics.per_user_tok_per_s_pooled([side[m][i] for i in ids])

    paired = pooled("eagle3", common) / pooled("ar", common)
    unpaired = pooled("eagle3", common) / pooled("ar", side["ar"])  # what dividing the points' own figures gave
    assert abs(paired / unpaired - 1) > 0.03  # the case makes a difference: 1.08x paired, 1.04x unpaired
    md = write_report([run_dir], tmp_path / "r.md").read_text()
    row = next(r for r in mdtables.tables(md)["Speedup at matched concurrency"]
               if (r["category"], r["method"], r["concurrency"]) == ("all", "EAGLE-3", "4"))  # fmt: skip
    assert row["speedup"] == f"{paired:.2f}×" and row["prompts both ran"] == "22 of 32"
    terms = [readings.terms([side[m][i] for i in common], "per_user") for m in ("ar", "eagle3")]
    assert row["95% decision interval"].replace("\\", "") == "[{:.2f}×, {:.2f}×]".format(*noise.ratio_ci(*terms))
    # accuracy and agreement are read on the same 22 prompts
    acc = [r for r in mdtables.tables(md)["Task accuracy"] if (r["method"], r["concurrency"]) == ("EAGLE-3", "4")]
    graded = [i for i in common if side["ar"][i].correct is not None]
    assert acc and all(f"/{len(graded)})" in r["accuracy"] for r in acc), acc
    assert row["agreement with AR"] == "100.0% (22/22)"


def _requests(n: int) -> list[Request]:
    return [Request(id=f"s0-{i}", workload="synthetic", category="math", messages=({"role": "user", "content": "p"},),
                    max_tokens=8) for i in range(n)]


def _result(request_id: str) -> RequestResult:
    return RequestResult(run_id="r", point_id="p", request_id=request_id, category="math", concurrency=2, ok=True,
                         error=None, queued_ns=0, sent_ns=0, first_token_ns=1, last_token_ns=2, output_tokens=8,
                         output_tokens_source="server", chunk_ns=(1, 2), chunk_tokens=(1, 7))  # fmt: skip


def test_a_loads_later_points_send_the_first_points_prefix_for_any_methods():
    """The load's first point (whichever method runs first) stopped after 12 of 32 requests: every later point of
    the load, whatever its method, sends exactly those 12 (the same prefix of the seeded order), no more and no
    fewer, and pairs with every earlier point of the load; a point of another load keeps its own."""
    requests = _requests(32)
    suite = SimpleNamespace(precision=0.2, requests_per_stream=1, methods=[Method.NGRAM, Method.DFLASH, Method.AR],
                            slo_requests=0)
    ctx = SimpleNamespace(suite=suite, finished_results={})
    point = lambda m, c=2: SimpleNamespace(method=m, workload_label="synthetic", concurrency=c, request_rate=None,  # noqa: E731
                                           repeat=0, closed_loop=True, trace=None)  # fmt: skip
    first = point(Method.NGRAM)
    assert load_prefix(ctx, first, requests) == requests  # the first point of a load sizes itself
    watch = precision_watch(ctx, first, requests, lambda: None, None)
    assert watch.floors.ceiling == 32 and watch.earlier == {}
    keep_load(ctx, first, watch, [_result(r.id) for r in requests[:12]])
    later = load_prefix(ctx, point(Method.DFLASH), requests)
    assert [r.id for r in later] == [r.id for r in requests[:12]]
    watch = precision_watch(ctx, point(Method.DFLASH), later, lambda: None, None)
    assert (watch.floors.min_requests, watch.floors.ceiling) == (12, 12) and set(watch.earlier) == {"ngram"}
    keep_load(ctx, point(Method.DFLASH), watch, [_result(r.id) for r in later])
    watch = precision_watch(ctx, point(Method.AR), load_prefix(ctx, point(Method.AR), requests), lambda: None, None)
    assert set(watch.earlier) == {"ngram", "dflash"} and watch.floors.ceiling == 12
    assert load_prefix(ctx, point(Method.DFLASH, c=4), requests) == requests  # another load
    ctx.suite = SimpleNamespace(**{**vars(suite), "precision": None})
    assert load_prefix(ctx, point(Method.DFLASH), requests) == requests  # not sized by precision: every request


def test_the_committed_default_runs_loads_stopped_together_and_say_how_they_were_sized(tmp_path):
    """The default embedded run made by today's code (precision-sized): the points of each load sent the same
    requests, and the report says how the points were sized and what they reached."""
    run = ROOT / tomllib.loads((ROOT / "reports" / "examples.toml").read_text())["readme"]["run"]
    r = load_run(run)
    req = r.requests[~r.requests["warmup"].astype(bool)]
    pts = r.points[r.points["category"] == "all"]
    for c, g in pts.groupby("concurrency"):
        sent = {pid: set(req.loc[req["point_id"] == pid, "request_id"]) for pid in g["point_id"]}
        assert len({frozenset(s) for s in sent.values()}) == 1, (c, {k: len(v) for k, v in sent.items()})
    assert all(isinstance(e, dict) and "precision" in e for e in pts["extra"])
    md = write_report([run], tmp_path / "d.md").read_text()
    assert "points sized to ±20%" in md.split("| run |")[0]


def test_a_run_without_pooled_rates_says_its_per_user_figure_is_the_mean_of_one_over_tpot(tmp_path):
    """Issue #53: a run without requests.jsonl whose points carry no pooled rate fell back to the mean of 1/TPOT
    under a "pooled" heading (3.11× where the pooled figure is 2.45×). The statistic is said on the table and the
    Pareto axis names it."""
    from dflashbench.measure import analysis

    old = ROOT / "results" / "examples" / "demo-20261123-120110-e69c"
    run = tmp_path / "no-requests"
    shutil.copytree(old, run)
    (run / "requests.jsonl").unlink()
    points = analysis.usable_points(load_run(run).points)
    assert analysis.interactivity_statistic(points) == "mean of 1/TPOT: these points carry no pooled rate"
    assert analysis.interactivity_statistic(analysis.usable_points(load_run(VLLM).points)).startswith("pooled")
    md = write_report([run], tmp_path / "r.md").read_text()
    caption = md.split("### Speedup at matched concurrency")[1].split("\n\n")[1]
    assert "; statistic: mean of 1/TPOT;" in caption
    fresh = write_report([old], tmp_path / "o.md").read_text()  # its requests give the pooled rate
    assert "; statistic: pooled;" in fresh.split("### Speedup at matched concurrency")[1].split("\n\n")[1]
