"""ReferenceBackend: the exact argv it launches, and the errors for what the reference decoder cannot do."""

from __future__ import annotations

import json
import sys

import pytest

from dflashbench.backends import get_backend
from dflashbench.backends.base import Backend, ServerSpec
from dflashbench.errors import UserError
from dflashbench.types import Method


@pytest.fixture
def draft_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"block_size": 16}))
    return str(tmp_path)


def test_dflash_argv_runs_dflashbench_serve_with_this_interpreter(draft_dir):
    backend = get_backend("reference")
    assert isinstance(backend, Backend) and backend.name == "reference"
    spec = ServerSpec(method=Method.DFLASH, model="/m/target", draft=draft_dir, port=8123,
                      served_model_name="tiny", extra_args=("--device", "cuda"))  # fmt: skip
    plan = backend.launch_plan(spec)
    assert plan.argv == (
        sys.executable, "-m", "dflashbench", "serve", "--model", "/m/target", "--method", "dflash",
        "--draft", draft_dir, "--host", "127.0.0.1", "--port", "8123", "--served-model-name", "tiny",
        "--device", "cuda",
    )  # fmt: skip
    assert plan.env["PYTHONUNBUFFERED"] == "1" and plan.files == {}
    assert backend.health_path() == "/health"


def test_ar_argv_has_no_draft():
    plan = get_backend("reference").launch_plan(ServerSpec(method=Method.AR, model="/m/t", draft="/m/d", port=9))
    assert plan.argv[3:] == ("serve", "--model", "/m/t", "--method", "ar", "--host", "127.0.0.1", "--port", "9")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (ServerSpec(method=Method.EAGLE3, model="/m"), "reference eagle3 needs an EAGLE-3 head: pass --draft"),
        (ServerSpec(method=Method.DFLASH, model="/m"), "reference dflash needs a DFlash drafter: pass --draft"),
        (ServerSpec(method=Method.AR, model="/m", tp=2), "runs on one device"),
    ],
)
def test_what_the_reference_decoder_cannot_do_is_a_user_error(spec, message):
    with pytest.raises(UserError, match=message):
        get_backend("reference").launch_plan(spec)


def test_eagle3_argv_passes_the_head_as_draft():
    plan = get_backend("reference").launch_plan(ServerSpec(method=Method.EAGLE3, model="/m/t", draft="/m/e3"))
    assert plan.argv[4:10] == ("--model", "/m/t", "--method", "eagle3", "--draft", "/m/e3")


def test_draft_length_goes_to_every_drafting_method_within_the_dflash_block(draft_dir):
    from dflashbench.reference.draft_length import DraftSchedule

    backend = get_backend("reference")
    spec = ServerSpec(method=Method.DFLASH, model="/m", draft=draft_dir, num_speculative_tokens=7)
    assert backend.launch_plan(spec).argv[8:12] == ("--draft", draft_dir, "--num-speculative-tokens", "7")
    with pytest.raises(UserError, match="drafts at most block_size - 1 = 15 tokens per step; a draft length of 16"):
        backend.launch_plan(ServerSpec(method=Method.DFLASH, model="/m", draft=draft_dir, num_speculative_tokens=16))
    schedule = DraftSchedule.parse("[[1,1,7],[2,64,3]]")
    eagle = backend.launch_plan(ServerSpec(method=Method.EAGLE3, model="/m", draft="/h", num_speculative_tokens=9,
                                           draft_schedule=schedule))  # fmt: skip
    assert eagle.argv[8:14] == ("--draft", "/h", "--num-speculative-tokens", "9",
                                "--num-speculative-tokens-per-batch-size", "[[1,1,7],[2,64,3]]")  # fmt: skip
    ngram = backend.launch_plan(ServerSpec(method=Method.NGRAM, model="/m", num_speculative_tokens=3))
    assert ngram.argv[6:10] == ("--method", "ngram", "--num-speculative-tokens", "3")
    with pytest.raises(UserError, match="a draft length of 20"):
        backend.launch_plan(ServerSpec(method=Method.DFLASH, model="/m", draft=draft_dir,
                                       draft_schedule=DraftSchedule.parse("[[1,1,20]]")))  # fmt: skip


def test_max_batch_size_raised_only_above_the_serve_default():
    backend = get_backend("reference")

    def spec(**kw):
        return ServerSpec(method=Method.AR, model="/m/t", port=9, **kw)

    assert "--max-batch-size" not in backend.launch_plan(spec(max_running_requests=8)).argv
    plan = backend.launch_plan(spec(max_running_requests=32, extra_args=("--device", "cuda")))
    assert plan.argv[-4:] == ("--max-batch-size", "32", "--device", "cuda")
    assert backend.concurrency_cap(spec()) == 8
    assert backend.concurrency_cap(spec(max_running_requests=4)) == 8
    assert backend.concurrency_cap(spec(max_running_requests=32)) == 32
    assert backend.concurrency_cap(spec(max_running_requests=32, extra_args=("--max-batch-size", "2"))) == 2


def test_endpoint_cap_is_unknown():
    assert get_backend("endpoint").concurrency_cap(ServerSpec(method=Method.AR, model="m")) is None
