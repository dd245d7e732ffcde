"""Traces are staged during a session and appear under results/ complete, in one rename."""

from __future__ import annotations

from dpbench.traces.store import TraceStore


def test_publish_moves_the_staged_traces_beside_the_run_and_leaves_partial_files_out(tmp_path):
    store = TraceStore("20260101T000000-1")
    try:
        staged, relative = store.dir_for("ddp-mlp-w2 b64")
        assert relative == "traces/20260101T000000-1/ddp-mlp-w2_b64"
        staged.mkdir()
        (staged / "rank0.json.gz").write_bytes(b"x")
        (staged / ".rank1.json.gz.partial").write_bytes(b"half")
        final = store.publish(tmp_path / "machine")
        assert final == tmp_path / "machine" / "traces" / "20260101T000000-1"
        assert sorted(p.name for p in (final / "ddp-mlp-w2_b64").iterdir()) == ["rank0.json.gz"]
        assert (tmp_path / "machine" / relative / "rank0.json.gz").read_bytes() == b"x"
        assert not list((tmp_path / "machine" / "traces").glob(".*"))
        assert store.publish(tmp_path / "machine") == final  # once
    finally:
        store.discard()
    assert not store.staging.exists()


def test_nothing_is_published_when_nothing_was_traced(tmp_path):
    store = TraceStore("r")
    assert store.publish(tmp_path) is None and not (tmp_path / "traces").exists()
    store.discard()
