"""`dflashbench generate` end to end on a tiny saved pair, and its one-line errors."""

import json

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.reference.tiny import write_tiny_pair


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return write_tiny_pair(tmp_path_factory.mktemp("pair"), block_size=4, seed=3, init_std=0.5)


def run(*args):
    return CliRunner().invoke(app, ["generate", *map(str, args)])


def test_generate_json_record_and_lossless_through_the_cli(pair):
    target, draft = pair
    common = ["--model", target, "--draft", draft, "--prompt", "w1 w2 w3", "--max-new-tokens", 20, "--json"]
    df, ar = run(*common), run(*common, "--method", "ar")
    assert df.exit_code == 0, df.output
    rec, ar_rec = json.loads(df.stdout), json.loads(ar.stdout)
    assert set(rec) >= {"text", "token_ids", "tau", "num_steps", "tok_per_s", "model", "draft"}
    assert rec["model"] == str(target) and rec["draft"] == str(draft) and ar_rec["draft"] is None
    assert rec["token_ids"] == ar_rec["token_ids"] and 1 <= len(rec["token_ids"]) <= 20
    assert ar_rec["tau"] in (1.0, None) and rec["tok_per_s"] > 0
    assert rec["text"] == ar_rec["text"]
    ng = run("--model", target, "--prompt", "w1 w2 w3", "--max-new-tokens", 20, "--json", "--method", "ngram")
    ng_rec = json.loads(ng.stdout)  # n-gram drafting: no --draft, lossless, tau over the steps that drafted
    assert ng_rec["token_ids"] == ar_rec["token_ids"] and ng_rec["draft"] is None
    assert 0 <= ng_rec["num_drafts"] <= ng_rec["num_steps"] and ng_rec["tokens_per_step"] <= ng_rec["tau"]


def test_generate_prints_text_then_tau_and_speed(pair):
    target, draft = pair
    res = run("--model", target, "--draft", draft, "--prompt", "w5", "--max-new-tokens", 8)
    assert res.exit_code == 0
    assert "tok/s" in res.stderr and "tau" in res.stderr
    assert res.stdout.strip() != ""


def _edit(path, fn):
    cfg = json.loads((path / "config.json").read_text())
    fn(cfg)
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda c: c.pop("num_hidden_layers"), "'num_hidden_layers' is missing"),
    (lambda c: c["dflash_config"].update(target_layer_ids=[1, 7]), "target_layer_ids [1, 7]"),
    (lambda c: c.update(num_target_layers=8), "num_target_layers 8 != target's 4 layers"),
    (lambda c: c["dflash_config"].update(mask_token_id=999), "mask_token_id 999 is outside the target vocabulary"),
    (lambda c: c.update(hidden_size=64, head_dim=8), "hidden_size"),
])
def test_bad_draft_is_one_line_error_without_traceback(pair, tmp_path, edit, needle):
    import shutil

    target, draft = pair
    bad = tmp_path / "bad"
    shutil.copytree(draft, bad)
    _edit(bad, edit)
    res = run("--model", target, "--draft", bad, "--prompt", "w1")
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines


def test_missing_directory_and_bad_method(pair):
    target, _ = pair
    res = run("--model", target, "--draft", "/nonexistent/draft", "--prompt", "w1")
    assert res.exit_code == 2 and "no such directory" in res.stderr
    res = run("--model", target, "--method", "beam", "--prompt", "w1")
    assert res.exit_code == 2 and "ar, dflash or ngram" in res.stderr
