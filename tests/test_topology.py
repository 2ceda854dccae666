"""Topology: Megatron's groups exactly, the patch's text file byte for byte, from traces."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REFERENCE

from traceviz.errors import TraceVizError, UsageError
from traceviz.topology import groups_file
from traceviz.topology.derive import layout_from_groups, observed_groups
from traceviz.topology.layout import Layout

DATA = Path(__file__).parent / "data"
REF_FILES = sorted((REFERENCE / "megatron_groups").glob("*.json")) if REFERENCE.is_dir() else []


def layout_of(config: dict) -> Layout:
    return Layout(world=config["world_size"], tp=config["tp"], pp=config["pp"],
                  cp=config["cp"], ep=config["ep"], expert_tp=config["expert_tp"],
                  order=config["order"])


@pytest.mark.skipif(not REF_FILES, reason="../shared/reference is absent")
@pytest.mark.parametrize("path", REF_FILES, ids=lambda p: p.name)
def test_equals_megatron_reference(path):
    ref = json.loads(path.read_text())
    layout = layout_of(ref["config"])
    assert layout.dp == ref["config"]["derived_dp"]
    assert layout.edp == ref["config"]["derived_expert_dp"]
    groups = layout.groups()
    for desc, expected in ref["groups_by_group_desc"].items():
        assert groups[desc] == expected, desc
    for token, expected in ref["rank_generator"]["decoder"].items():
        assert layout.generator("dense", token) == expected, token
    for token, expected in ref["rank_generator"]["expert"].items():
        assert layout.generator("expert", token) == expected, token
    for coords in ref["per_rank"]:
        want = {k: v for k, v in coords.items() if k not in ("rank", "virtual_stages")}
        assert layout.coordinates(coords["rank"]) == want
        assert layout._coordinates_by_search(coords["rank"]) == want


@pytest.mark.skipif(not REF_FILES, reason="../shared/reference is absent")
@pytest.mark.parametrize("path", REF_FILES, ids=lambda p: p.name)
def test_layout_from_recorded_groups(path):
    """The pg_config each rank would record gives back the same layout."""
    ref = json.loads(path.read_text())
    world = ref["config"]["world_size"]
    configs = []
    for rank in range(world):
        configs.append([{"pg_name": str(i), "pg_desc": desc, "ranks": g, "pg_size": len(g)}
                        for i, (desc, groups) in enumerate(ref["groups_by_group_desc"].items())
                        for g in groups if rank in g])
    assert layout_from_groups(observed_groups(configs), world) == layout_of(ref["config"])


def test_patch_file_byte_for_byte():
    text = (DATA / "unique_parallel_groups_20260105_144840.txt").read_text()
    assert not text.endswith("\n")
    assert groups_file.render(groups_file.parse_text(text)) == text
    built = groups_file.GroupsFile.from_layout(Layout(32, tp=4, pp=4), 48,
                                               "2026-01-05 14:48:40.123456")
    assert groups_file.render(built) == text
    assert groups_file.parse_text(text).layout() == Layout(32, tp=4, pp=4)


@pytest.mark.parametrize("layout", [Layout(8, tp=1, pp=2, ep=2), Layout(16, tp=2, pp=2, cp=2),
                                    Layout(64, tp=2, pp=4, ep=4, expert_tp=1),
                                    Layout(12, tp=3, pp=2), Layout(1)])
def test_round_trip(layout):
    f = groups_file.GroupsFile.from_layout(layout, 96)
    f.errors = {3: "timeout collecting groups"} if layout.world > 8 else {}
    text = groups_file.render(f)
    again = groups_file.parse_text(text)
    assert groups_file.render(again) == text
    assert again.layout() == layout
    assert again.groups["tp"] == sorted(layout.generator("dense", "tp"))


def test_expert_example():
    """world 8, TP1 EP2 PP2 (the research note's example)."""
    f = groups_file.GroupsFile.from_layout(Layout(8, tp=1, pp=2, ep=2))
    assert f.groups["ep"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert f.groups["pp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert f.groups["dp"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert f.full_model == {0: [0, 1, 4, 5], 1: [2, 3, 6, 7]}


def test_inconsistent_sizes():
    with pytest.raises(UsageError, match="not divisible"):
        Layout(10, tp=4)
    with pytest.raises(UsageError, match="not divisible"):
        Layout(16, tp=2, pp=2, ep=3)
    groups = observed_groups([[{"pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": [0, 2]},
                               {"pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP", "ranks": [0, 1]}]])
    with pytest.raises(TraceVizError, match="match no Megatron layout"):
        layout_from_groups(groups, 4)


def test_cli(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "traceviz", "topology", *a],  # noqa: E731
                                    capture_output=True, text=True)
    proc = run("--world", "32", "--tp", "4", "--pp", "4", "--global-batch-size", "48",
               "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    written = list(tmp_path.glob("unique_parallel_groups_*.txt"))
    assert len(written) == 1
    parsed = groups_file.parse_text(written[0].read_text())
    assert parsed.groups["dp"][0] == [0, 4] and parsed.global_batch_size == "48"
    proc = run("--world", "16", "--tp", "2", "--pp", "2", "--cp", "2", "--json")
    data = json.loads(proc.stdout)
    assert data["groups_by_group_desc"]["DATA_PARALLEL_GROUP_WITH_CP"][0] == [0, 2, 4, 6]
    proc = run("--world", "10", "--tp", "4")
    assert proc.returncode == 2 and "not divisible" in proc.stderr
    assert "Traceback" not in proc.stderr
