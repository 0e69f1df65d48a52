import json

import pytest

from dflashbench.errors import UserError
from dflashbench.run.store import RunStore, load_run, redact_secrets
from dflashbench.types import POINT_CONTRACT_FIELDS, PointSummary, RequestResult


def _request(i: int, point_id: str = "p1", **kw) -> RequestResult:
    base = dict(
        run_id="r", point_id=point_id, request_id=f"q{i}", category="math", concurrency=2, ok=True, error=None,
        queued_ns=100 + i, sent_ns=110 + i, first_token_ns=200 + i, last_token_ns=400 + i, output_tokens=5,
        output_tokens_source="server", chunk_ns=(200 + i, 300 + i, 400 + i), chunk_tokens=(1, 2, 2),
    )  # fmt: skip
    base.update(kw)
    return RequestResult(**base)


def _point(point_id: str = "p1", category: str = "all", status: str = "ok", **kw) -> PointSummary:
    fields = {name: None for name in POINT_CONTRACT_FIELDS if name != "schema_version"}
    fields.update(
        run_id="r", backend="reference", method="dflash", model="m", draft="d", workload="synthetic",
        category=category, concurrency=2, num_gpus=0, num_requests=2, num_errors=0, output_tokens=10,
        point_id=point_id, status=status,
    )  # fmt: skip
    fields.update(kw)
    return PointSummary(**fields)


def test_round_trip_through_pandas(tmp_path):
    store = RunStore.create(tmp_path, {"config": {"suite": "demo"}}, run_id="run-1")
    assert store.run_dir == tmp_path / "run-1" and store.run_id == "run-1"
    for i in range(3):
        store.append_request(_request(i))
    store.append_point(_point(tau=4.25, throughput_tok_per_s=12.5))
    store.append_telemetry({"t_ns": 1, "power_w": 300.0, "point_id": "p1"})
    store.update_manifest(finished_at="later")
    store.close()

    run = load_run(tmp_path / "run-1")
    assert run.run_id == "run-1"
    assert run.manifest["config"] == {"suite": "demo"} and run.manifest["finished_at"] == "later"
    assert list(run.requests["request_id"]) == ["q0", "q1", "q2"]
    assert list(run.requests.loc[0, "chunk_tokens"]) == [1, 2, 2]
    assert RequestResult.from_dict(run.requests.iloc[1].to_dict()) == _request(1)
    assert run.points.loc[0, "tau"] == 4.25 and run.points.loc[0, "throughput_tok_per_s"] == 12.5
    assert set(POINT_CONTRACT_FIELDS) <= set(run.points.columns)
    assert run.telemetry.loc[0, "power_w"] == 300.0


def test_each_line_is_on_disk_as_soon_as_it_is_appended(tmp_path):
    store = RunStore.create(tmp_path, {}, run_id="live")
    store.append_request(_request(0))
    # read with a separate reader while the writer still holds its file open: a crash now loses nothing
    assert len(load_run(store.run_dir).requests) == 1
    store.close()


def test_empty_run_has_contract_columns(tmp_path):
    RunStore.create(tmp_path, {}, run_id="empty")
    run = load_run(tmp_path / "empty")
    assert run.points.empty and set(POINT_CONTRACT_FIELDS) <= set(run.points.columns)
    assert run.requests.empty and "output_tokens" in run.requests.columns


def test_truncated_last_line_is_tolerated_and_cut_on_resume(tmp_path):
    store = RunStore.create(tmp_path, {}, run_id="crash")
    store.append_request(_request(0))
    store.append_request(_request(1))
    store.close()
    path = store.run_dir / "requests.jsonl"
    full = path.read_text()
    path.write_text(full + full.splitlines()[0][:40])  # a crash mid-write: half a line, no newline
    assert list(load_run(store.run_dir).requests["request_id"]) == ["q0", "q1"]

    reopened = RunStore.open(store.run_dir)
    reopened.append_request(_request(2))
    reopened.close()
    assert path.read_text().count("\n") == 3
    assert list(load_run(store.run_dir).requests["request_id"]) == ["q0", "q1", "q2"]


def test_corrupt_line_in_the_middle_is_an_error(tmp_path):
    store = RunStore.create(tmp_path, {}, run_id="bad")
    store.append_point(_point())
    store.close()
    path = store.run_dir / "points.jsonl"
    path.write_text("{not json\n" + path.read_text())
    with pytest.raises(UserError, match=r"points.jsonl:1: not valid JSON"):
        load_run(store.run_dir)


def test_not_a_run_directory(tmp_path):
    with pytest.raises(UserError, match="not a run directory"):
        load_run(tmp_path)
    with pytest.raises(UserError, match="not a directory"):
        load_run(tmp_path / "missing")
    with pytest.raises(UserError, match="not a run directory"):
        RunStore.open(tmp_path)


def test_create_never_reuses_a_run_directory(tmp_path):
    RunStore.create(tmp_path, {}, run_id="same")
    with pytest.raises(UserError, match="already exists"):
        RunStore.create(tmp_path, {}, run_id="same")


def test_finished_points_and_discarding_a_failed_one(tmp_path):
    store = RunStore.create(tmp_path, {}, run_id="resume")
    store.append_request(_request(0, point_id="p1"))
    store.append_point(_point("p1", "math"))
    store.append_point(_point("p1", "all"))
    store.append_request(_request(1, point_id="p2"))
    store.append_point(_point("p2", "all", status="failed", failure_reason="server died"))
    assert store.finished_point_ids() == {"p1"}

    assert store.discard_points({"p2"}) == 2
    assert list(load_run(store.run_dir).requests["point_id"]) == ["p1"]
    store.append_request(_request(2, point_id="p2"))  # measured again
    store.append_point(_point("p2", "all"))
    store.close()
    run = load_run(store.run_dir)
    assert list(run.points["status"]) == ["ok", "ok", "ok"]
    assert RunStore.open(store.run_dir).finished_point_ids() == {"p1", "p2"}


def test_a_point_is_done_only_with_a_row_for_each_category_its_requests_had(tmp_path):
    store = RunStore.create(tmp_path, {}, run_id="torn")
    for i, (point, category) in enumerate([("p1", "math"), ("p1", "code"), ("p2", "math"), ("p2", "code"),
                                           ("p3", "math"), ("p4", "math")]):  # fmt: skip
        store.append_request(_request(i, point_id=point, category=category))
    store.append_request(_request(9, point_id="p1", category="writing", warmup=True))  # a warm-up has no row
    for point, categories in [("p1", ("all", "code", "math")), ("p2", ("all", "math")), ("p3", ("all",)),
                              ("p4", ()), ("p5", ("all",))]:  # fmt: skip
        for category in categories:
            store.append_point(_point(point, category))
    finished, torn = store.point_states()
    assert finished == {"p1", "p3"}  # p3: one category, no category row needed
    assert torn == {"p2": "2 of its 3 rows in points.jsonl (no row for code: a crash or a full disk cut it)",
                    "p5": "none of its requests is in requests.jsonl"}  # fmt: skip
    store.close()


def test_redact_secrets():
    cfg = {
        "api_key": "sk-abcdefghijklmnop",
        "api_key_env": "OPENAI_API_KEY",
        "headers": {"Authorization": "Bearer abc.def"},
        "env": {"HF_TOKEN": "hf_abcdefghijklmnopqrstu", "CUDA_VISIBLE_DEVICES": "0"},
        "max_tokens": 96,
        "num_speculative_tokens": 15,
        "argv": ["vllm", "serve", "m", "--api-key", "s3cret", "--hf-token=xyz", "--max-tokens", "4"],
        "note": "called with Bearer tok123 and key sk-zyxwvutsrqponm",
    }
    out = redact_secrets(cfg)
    assert out["api_key"] == "***" and out["api_key_env"] == "OPENAI_API_KEY"
    assert out["headers"]["Authorization"] == "***"
    assert out["env"] == {"HF_TOKEN": "***", "CUDA_VISIBLE_DEVICES": "0"}
    assert out["max_tokens"] == 96 and out["num_speculative_tokens"] == 15
    assert out["argv"] == ["vllm", "serve", "m", "--api-key", "***", "--hf-token=***", "--max-tokens", "4"]
    assert "tok123" not in out["note"] and "sk-zyx" not in out["note"]
    assert cfg["api_key"].startswith("sk-")  # the input is not modified


def test_manifest_is_redacted_on_disk(tmp_path):
    store = RunStore.create(tmp_path, {"api_key": "sk-abcdefghijklmnop"}, run_id="secret")
    store.update_manifest(headers={"Authorization": "Bearer zzz"})
    text = (store.run_dir / "manifest.json").read_text()
    assert "sk-abcdefghijklmnop" not in text and "zzz" not in text
    assert json.loads(text)["api_key"] == "***"


def test_the_store_gives_typed_records_as_written(tmp_path):
    """Typed on the way out (issue #47): a run's points and requests come back as the records that were written,
    and a request row read through a DataFrame whose column has a gap gets None there, not NaN, and ints stay ints."""
    store = RunStore.create(tmp_path, {"config": {}}, run_id="run-1")
    written = [_request(0), _request(1, first_token_ns=None, last_token_ns=None, ok=False, error="timeout",
                                     chunk_ns=(), chunk_tokens=(), output_tokens=0)]  # fmt: skip
    for r in written:
        store.append_request(r)
    store.append_point(_point(tau=4.25, ttft_s_p50=0.01, throughput_tok_per_s=12.5, mean_power_w=300.0))
    store.close()
    run = load_run(tmp_path / "run-1")
    assert run.request_records() == written and run.request_records(measured_only=True) == written
    (point,) = run.point_records()
    assert isinstance(point, PointSummary) and point.tau == 4.25
    from_frame = [RequestResult.from_dict(row) for row in run.requests.to_dict("records")]
    assert from_frame == written  # pandas made first_token_ns a float column with NaN: read back as None and ints
    assert isinstance(from_frame[0].first_token_ns, int) and from_frame[1].first_token_ns is None
    assert point.latency["ttft_s_p50"] == 0.01 and point.throughput["throughput_tok_per_s"] == 12.5
    assert point.speculation["tau"] == 4.25 and point.load["concurrency"] == 2
    assert point.telemetry["mean_power_w"] == 300.0
    grouped = {k for g in (point.latency, point.throughput, point.speculation, point.load, point.telemetry) for k in g}
    assert grouped <= set(point.to_dict())  # the groups read the stored names; nothing renamed
