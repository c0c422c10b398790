"""Which tasks a batch runs: KernelBench checkouts, folders, list files; --level, --tasks, --limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from kforge.agent.batch.tasks import BatchInputError, parse_ints, select


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for level, names in {1: ["1_A", "2_B", "10_C", "3_D"], 2: ["1_E", "2_F"], 3: ["7_G"]}.items():
        folder = tmp_path / "KernelBench" / "KernelBench" / f"level{level}"
        folder.mkdir(parents=True)
        for name in names:
            (folder / f"{name}.py").write_text("# task\n")
    return tmp_path / "KernelBench"


def test_checkout_levels_in_numeric_order(checkout):
    entries = select([checkout], None, None, None)
    assert [e.key for e in entries] == [
        "level1/1_A", "level1/2_B", "level1/3_D", "level1/10_C", "level2/1_E", "level2/2_F", "level3/7_G",
    ]  # fmt: skip
    assert entries[3].problem_id == 10 and entries[3].folder_name == "level1__10_C"


def test_level_task_ids_and_a_limit_per_level(checkout):
    assert [e.key for e in select([checkout], [2], None, None)] == ["level2/1_E", "level2/2_F"]
    assert [e.key for e in select([checkout], [1, 2], [1, 10], None)] == [
        "level1/1_A",
        "level1/10_C",
        "level2/1_E",
    ]
    assert [e.key for e in select([checkout], None, None, 1)] == ["level1/1_A", "level2/1_E", "level3/7_G"]
    level_dir = checkout / "KernelBench" / "level3"
    assert [e.key for e in select([level_dir], None, None, None)] == ["level3/7_G"]


def test_list_file_and_plain_folder(tmp_path, checkout):
    listing = tmp_path / "tasks.txt"
    listing.write_text(
        "# chosen\nKernelBench/KernelBench/level2/2_F.py\n\n"
        + str(checkout / "KernelBench/level1/1_A.py")
        + "\n"
    )
    assert [e.key for e in select([listing], None, None, None)] == ["level2/2_F", "level1/1_A"]
    plain = tmp_path / "mine"
    plain.mkdir()
    (plain / "b.py").write_text("")
    (plain / "a.py").write_text("")
    assert [e.key for e in select([plain], None, None, None)] == ["a", "b"]


def test_bad_input_is_one_line(tmp_path, checkout):
    with pytest.raises(BatchInputError, match="no such file"):
        select([tmp_path / "missing"], None, None, None)
    with pytest.raises(BatchInputError, match="no task files selected"):
        select([checkout], [9], None, None)
    with pytest.raises(BatchInputError, match="comma-separated integers"):
        parse_ints("1,x", "--tasks")


def test_task_files_of_the_same_name_both_run_under_ids_with_their_source_hash(tmp_path):
    for folder, text in (("a", "x = 1\n"), ("b", "x = 2\n"), ("c", "x = 1\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "scale_relu.py").write_text(text)
    (tmp_path / "other.py").write_text("")
    notes: list[str] = []
    paths = [
        tmp_path / "a",
        tmp_path / "b",
        tmp_path / "c",
        tmp_path / "a" / "scale_relu.py",
        tmp_path / "other.py",
    ]
    entries = select(paths, None, None, None, notes)
    keys = [e.key for e in entries]
    assert len(keys) == 3 and keys[2] == "other" and len(set(keys)) == 3
    assert all(k.startswith("scale_relu@") for k in keys[:2])
    assert [e.path for e in entries[:2]] == [(tmp_path / f / "scale_relu.py").resolve() for f in "ab"]
    assert any(f"they run as {keys[0]}, {keys[1]}" in n for n in notes)  # shown to the user
    assert any("c/scale_relu.py is a copy of" in n for n in notes)  # same name and source: runs once
    assert [e.key for e in select(paths[:2], None, None, None)] == keys[:2]  # the same ids on resume


def test_a_list_file_that_is_not_utf8_or_holds_a_nul_is_one_line_error(tmp_path):
    listing = tmp_path / "tasks.txt"
    listing.write_bytes(b"\xff\xfe a.py\n")
    with pytest.raises(BatchInputError, match="not UTF-8"):
        select([listing], None, None, None)
    listing.write_text("a.py\x00/etc/passwd\n")
    with pytest.raises(BatchInputError, match="NUL byte"):
        select([listing], None, None, None)


def test_a_level_on_a_folder_that_is_not_kernelbench_is_an_error(tmp_path):
    (tmp_path / "1_a.py").write_text("x = 1\n")
    with pytest.raises(BatchInputError, match="--level 1: no KernelBench level folders"):
        select([tmp_path], [1], None, None)
