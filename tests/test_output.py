import shutil
import subprocess

import pytest
from kforge.tools.output import output_folder


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_folder_kforge_makes_stays_out_of_git(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    made = output_folder(tmp_path / "kforge-runs" / "task-1")
    (made / "best.py").write_text("import os\nx=1\n")
    status = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain"], capture_output=True, text=True
    )
    assert status.stdout == ""
    assert (tmp_path / "kforge-runs" / ".gitignore").is_file()


def test_a_folder_the_user_made_is_left_alone(tmp_path):
    output_folder(tmp_path)
    assert not (tmp_path / ".gitignore").exists()


def test_a_folder_inside_kforge_output_gets_no_second_gitignore(tmp_path):
    output_folder(tmp_path / "batch")
    output_folder(tmp_path / "batch" / "runs" / "task-1")
    assert (tmp_path / "batch" / ".gitignore").is_file()
    assert not (tmp_path / "batch" / "runs" / ".gitignore").exists()
