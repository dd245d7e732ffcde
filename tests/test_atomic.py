"""Directories a command made and left empty go; a directory that was there, or holds a file, stays."""

from __future__ import annotations

import pytest

from dpbench._atomic import missing_root, no_empty_directories, remove_empty_tree


def test_missing_root_is_the_outermost_directory_mkdir_parents_would_make(tmp_path):
    assert missing_root(tmp_path / "a" / "b" / "c") == tmp_path / "a"
    assert missing_root(tmp_path) is None


def test_remove_empty_tree_keeps_every_directory_on_the_way_to_a_file(tmp_path):
    (tmp_path / "t" / "empty" / "deeper").mkdir(parents=True)
    (tmp_path / "t" / "full" / "inner").mkdir(parents=True)
    (tmp_path / "t" / "full" / "inner" / "run.json").write_text("{}")
    assert remove_empty_tree(tmp_path / "t") is False
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "t",
        "t/full",
        "t/full/inner",
        "t/full/inner/run.json",
    ]
    assert remove_empty_tree(tmp_path / "gone") is True  # nothing there: nothing left behind either


def test_what_the_block_made_and_left_empty_goes_however_the_block_ends(tmp_path):
    with pytest.raises(KeyboardInterrupt), no_empty_directories(tmp_path / "a" / "results"):
        (tmp_path / "a" / "results" / "machine").mkdir(parents=True)
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_a_directory_that_existed_or_got_a_file_stays(tmp_path):
    (tmp_path / "results").mkdir()
    with no_empty_directories(tmp_path / "results"):
        pass
    assert (tmp_path / "results").is_dir()
    with no_empty_directories(tmp_path / "new" / "results"):
        (tmp_path / "new" / "results" / "m").mkdir(parents=True)
        (tmp_path / "new" / "results" / "m" / "0001_run.json").write_text("{}")
    assert (tmp_path / "new" / "results" / "m" / "0001_run.json").is_file()
