"""The typed manifest: every committed run loads, unknown fields survive, a newer schema and a mistyped field
are refused with the file and the field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflashbench.errors import UserError
from dflashbench.run.manifest import MANIFEST_SCHEMA, Manifest, parse_manifest
from dflashbench.run.store import RunStore, load_manifest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent.parent / "results" / "examples").glob("*/manifest.json"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_committed_run_loads_typed(path):
    raw = json.loads(path.read_text(encoding="utf-8"))
    meta = load_manifest(path.parent)
    assert meta.run_id == raw["run_id"] and meta.status == raw["status"]
    assert meta.suite_config == raw["suite_config"] and meta.grid == raw["grid"]
    assert set(meta.servers) == set(raw.get("servers") or {})
    for name, server in meta.servers.items():
        assert server.argv == raw["servers"][name]["argv"]


def test_a_new_run_records_its_schema_and_unknown_fields_survive_a_round_trip(tmp_path):
    with RunStore.create(tmp_path, {"status": "running", "a_later_field": {"x": 1}}, run_id="r") as store:
        meta = store.manifest
    assert meta.manifest_schema == MANIFEST_SCHEMA and meta.run_id == "r"
    assert meta.model_dump()["a_later_field"] == {"x": 1}
    assert meta.outputs.store_text is True and meta.servers == {}  # defaults for what an older run lacks


def test_temperature_comes_from_the_suite_and_defaults_to_greedy():
    assert Manifest().temperature == 0.0
    assert parse_manifest({"suite_config": {"temperature": 0.7}}).temperature == 0.7


def test_a_newer_schema_is_refused_with_the_fix():
    with pytest.raises(UserError, match=r"manifest_schema 99, newer .* upgrade dflashbench"):
        parse_manifest({"manifest_schema": 99}, where="run/manifest.json")


def test_a_mistyped_field_names_the_file_and_the_field():
    with pytest.raises(UserError, match=r"run/manifest.json: field servers\.ar\.pid"):
        parse_manifest({"servers": {"ar": {"argv": ["x"], "pid": "not a pid"}}}, where="run/manifest.json")
