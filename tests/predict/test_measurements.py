"""nccl-tests logs and saved comm-suite runs → Measurement records, and the one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpbench.errors import UsageError
from dpbench.predict.measurements import Measurement, read_comm_run, read_measurements, read_nccl_tests

DATA = Path(__file__).parent / "data"

# log: (rows, ranks, nodes, ranks per node, first (bytes, µs), last (bytes, µs))
LOGS = {
    "nccl_1.log": (28, 1, 1, 1, (8, 4.47), (1 << 30, 1620.4)),
    "nccl_2.log": (28, 2, 1, 2, (8, 8.65), (1 << 30, 5203.1)),
    "nccl_4.log": (28, 4, 1, 4, (8, 16.42), (1 << 30, 7173.7)),
    "nccl_8.log": (28, 8, 1, 8, (8, 31.44), (1 << 30, 8139.2)),
    "nccl_16.log": (25, 16, 2, 8, (1024, 34.66), (16 << 30, 251757.0)),
}


@pytest.mark.parametrize("name", sorted(LOGS))
def test_each_shared_log_reads_exactly(name):
    rows, world, nodes, per_node, first, last = LOGS[name]
    got = read_nccl_tests(DATA / name, collective="all_reduce")
    assert len(got) == rows
    assert {(m.collective, m.world_size, m.nodes, m.ranks_per_node) for m in got} == {
        ("all_reduce", world, nodes, per_node)
    }
    assert (got[0].bytes, got[0].time_us) == first
    assert (got[-1].bytes, got[-1].time_us) == last


def _log(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


HEADER = """# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#  Rank  0 Group  0 Pid   6899 on host-a device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   6900 on host-a device  1 [0000:05:00] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid   6733 on host-b device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""


def test_the_collective_comes_from_the_file_name_and_the_root_column_is_skipped(tmp_path):
    rows = "  8  2  float  none  -1  12.50  0.00  0.00  0  12.00  0.00  0.00  0\n"
    got = read_nccl_tests(_log(tmp_path, "all_gather_perf.txt", HEADER + rows))
    assert got == [
        Measurement(
            collective="all_gather",
            bytes=8,
            world_size=3,
            nodes=2,
            ranks_per_node=2,
            time_us=12.5,
            source=str(tmp_path / "all_gather_perf.txt"),
            backend="nccl",
        )
    ]


def test_the_collective_comes_from_the_log_and_another_one_asked_is_refused(tmp_path):
    text = (
        "# Collective test starting: reduce_scatter_perf\n"
        + HEADER
        + "  16  4  float  sum  -1  9.0  0  0  0  9.1  0  0  0\n"
    )
    path = _log(tmp_path, "run.log", text)
    (got,) = read_nccl_tests(path)
    assert (got.collective, got.bytes, got.time_us) == ("reduce_scatter", 16, 9.0)
    assert read_nccl_tests(path, collective="reduce_scatter") == [got]
    with pytest.raises(UsageError) as e:
        read_nccl_tests(path, collective="broadcast")
    assert str(e.value) == (
        f"{path}: a log of reduce_scatter (its '# Collective test starting' line), but --collective asks for "
        "broadcast: expected --collective reduce_scatter, or a log of broadcast"
    )
    named = _log(tmp_path, "all_gather_perf.log", HEADER + "  16  4  float  sum  -1  9.0  0  0  0  9.1  0  0  0\n")
    with pytest.raises(
        UsageError, match=r"all_gather_perf.log: a log of all_gather \(its file name\), but --collective"
    ):
        read_measurements([named], collective="all_reduce")


def test_a_log_that_names_no_collective_asks_for_the_option(tmp_path):
    path = _log(tmp_path, "run.log", HEADER + "  8  2  float  sum  -1  9.0  0  0  0  9.1  0  0  0\n")
    with pytest.raises(UsageError, match=r"run.log: which collective\? .*expected --collective all_reduce\|"):
        read_nccl_tests(path)
    with pytest.raises(
        UsageError, match=r"--collective: expected one of .*found 'allreduce' \(did you mean 'all_reduce'\?\)"
    ):
        read_nccl_tests(path, collective="allreduce")


def test_not_nccl_tests_output_names_the_file_and_the_line(tmp_path):
    path = _log(tmp_path, "notes.txt", "# a comment\nhello world\n")
    with pytest.raises(UsageError) as e:
        read_nccl_tests(path, collective="all_reduce")
    assert str(e.value) == (
        f"{path}:2: not nccl-tests output: expected '#' comments, the column header or a result row, "
        "found 'hello world'"
    )
    assert "\n" not in str(e.value)


def test_a_broken_row_names_its_line(tmp_path):
    path = _log(
        tmp_path,
        "all_reduce_perf.log",
        HEADER + "  8  2  float  sum  -1  9.0  0  0  0  9.1  0  0  0\n  16  4  float  oops\n",
    )
    with pytest.raises(UsageError, match=r"all_reduce_perf.log:12: not an nccl-tests result row: expected 13 columns"):
        read_nccl_tests(path)


def test_an_mpi_tag_inside_a_line_is_removed_too(tmp_path):
    # two ranks' writes interleaved: a tag lands inside a device line (as in the public 128-GPU log)
    tagged = "".join(f"[1,0]<stdout>:{line}\n" for line in HEADER.splitlines())
    tagged = tagged.replace("Pid   6900 on host-a device", "Pid   6900 on host-[1,0]<stdout>:a device")
    got = read_nccl_tests(
        _log(tmp_path, "all_reduce.log", tagged + "[1,0]<stdout>:  8 2 float sum -1 9.0 0 0 0 9.1 0 0 0\n")
    )
    assert [(m.world_size, m.nodes, m.ranks_per_node, m.time_us) for m in got] == [(3, 2, 2, 9.0)]


def test_an_empty_file_and_a_log_without_devices_are_refused(tmp_path):
    with pytest.raises(UsageError, match=r"empty.log: not nccl-tests output: expected the '#  size  count"):
        read_nccl_tests(_log(tmp_path, "empty.log", ""), collective="all_reduce")
    no_devices = (
        "\n".join(line for line in HEADER.splitlines() if "Rank" not in line)
        + "\n  8 2 float sum -1 9.0 0 0 0 9.1 0 0 0\n"
    )
    with pytest.raises(UsageError, match="without its '# Using devices' lines"):
        read_nccl_tests(_log(tmp_path, "all_reduce.log", no_devices))


def test_a_saved_comm_run_gives_its_collectives(tmp_path):
    def bench(collective, size, world, time_s):
        info = {
            "schema": 2,
            "kind": "collective",
            "collective": collective,
            "size_bytes": size,
            "world_size": world,
            "nodes": 1,
            "ranks_per_node": world,
            "time_s": time_s,
        }
        name = f"test_comm[{collective}-{size}]"
        stats = {"median": time_s, "rounds": 5}
        return {"name": name, "fullname": f"suites/test_comm.py::{name}", "stats": stats, "extra_info": info}

    doc = {
        "machine_info": {},
        "datetime": "2026-01-01T00:00:00",
        "commit_info": {},
        "benchmarks": [bench("all_reduce", 4096, 2, 1e-4), bench("broadcast", 4096, 2, 5e-5)],
    }
    path = tmp_path / "0001_comm.json"
    path.write_text(json.dumps(doc))
    got = read_measurements([path])
    assert [(m.collective, m.bytes, m.world_size, m.nodes, round(m.time_us, 6)) for m in got] == [
        ("all_reduce", 4096, 2, 1, 100.0),
        ("broadcast", 4096, 2, 1, 50.0),
    ]
    doc["benchmarks"] = [{**bench("all_reduce", 8, 2, 1e-5), "extra_info": {"schema": 2, "kind": "training"}}]
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="a saved run without collective benchmarks"):
        read_comm_run(path)
