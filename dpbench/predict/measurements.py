"""Collective timings as the model reads them, from any mix of sources: nccl-tests text output
(``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``, ``broadcast_perf``, with or
without an MPI ``[r,0]<stdout>:`` prefix) and dpbench's own saved comm-suite runs.

Every source becomes :class:`Measurement` records: one collective, one message size, one group
(world size, nodes, ranks per node), one time. A file that cannot be read is a
:class:`~dpbench.errors.UsageError` of one line naming the file and the line that broke the parser.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from dpbench.errors import UsageError, check_choice

__all__ = ["COLLECTIVES", "Measurement", "read_comm_run", "read_measurements", "read_nccl_tests"]

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
"""The collectives the model knows, named as dpbench's comm suite names them."""


@dataclass(kw_only=True, frozen=True)
class Measurement:
    """One measured collective call: what was sent, among whom, and how long it took."""

    collective: str
    """``all_reduce``, ``all_gather``, ``reduce_scatter`` or ``broadcast``."""
    bytes: int
    """The message size as nccl-tests reports it (the whole buffer; all_gather: the gathered output)."""
    world_size: int
    """Ranks in the group."""
    nodes: int
    """Hosts the ranks ran on (1: every rank inside one node)."""
    ranks_per_node: int
    """The most ranks on one host."""
    time_us: float
    """Time per call in microseconds (nccl-tests: the out-of-place column; a saved run: the median)."""
    source: str
    """The file it came from."""
    backend: str | None = None
    """The library that ran it: ``nccl`` (nccl-tests), a comm-suite run's process-group backend; None: not recorded."""


# An MPI launcher's per-line tag: ``[1,0]<stdout>:`` (Open MPI's --tag-output). Removed wherever it
# is: where two ranks' writes interleave, a tag lands inside a line (``on node-[1,0]<stdout>:00000C``).
_MPI_PREFIX = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")
_DEVICE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\b")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\w+?)(?:_perf)?\s*$")
# NCCL's own debug lines (NCCL_DEBUG=INFO) interleave with the table: ``host:pid:tid [0] NCCL INFO …``.
_NCCL_DEBUG = re.compile(r"\bNCCL (?:INFO|WARN|TRACE)\b")
# Binary and file names spell a collective without its underscore (allreduce, allgather,
# reducescatter), or broadcast as nccl-tests' bcast.
_NAME_ALIASES = {name.replace("_", ""): name for name in COLLECTIVES if "_" in name} | {"bcast": "broadcast"}


def _collective_in(text: str) -> str | None:
    """The collective a binary name or a file name names (``all_reduce_perf``, ``allgather.log``), or None."""
    flat = text.lower().replace("-", "_")
    for name in COLLECTIVES:
        if name in flat:
            return name
    squashed = flat.replace("_", "")
    for alias, name in _NAME_ALIASES.items():
        if alias in squashed:
            return name
    return None


def _check_collective(name: str, what: str) -> str:
    return check_choice(what, name, COLLECTIVES)


def read_nccl_tests(path: str | Path, *, collective: str | None = None) -> list[Measurement]:
    """The out-of-place rows of one nccl-tests log.

    The collective comes from the log's ``# Collective test starting:`` line, else the file name
    (``all_gather_perf.log``), else ``collective``; a log that names another collective than
    ``collective`` is refused. The ranks and their hosts come from the ``# Using devices`` lines
    (ranks per node: the ranks on one host name)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not nccl-tests output (not UTF-8 text)") from None
    named = None
    hosts: dict[int, str] = {}
    columns: list[str] | None = None
    rows: list[tuple[int, int, float]] = []  # (line number, bytes, time_us)
    for number, raw in enumerate(lines, start=1):
        line = _MPI_PREFIX.sub("", raw).strip()
        if not line or _NCCL_DEBUG.search(line):
            continue
        if line.startswith("#"):
            if m := _DEVICE.match(line):
                hosts[int(m.group(1))] = m.group(2)
            elif m := _STARTING.match(line):
                named = _check_collective(_collective_in(m.group(1)) or m.group(1), f"{path}:{number}")
            elif re.match(r"^#\s*size\s+count\s+type\b", line):
                columns = line.lstrip("#").split()
            continue
        rows.append(_row(path, number, raw, line, columns))
    if not rows:
        raise UsageError(
            f"{path}: not nccl-tests output: expected the '#  size  count  type ... time' header and its rows, "
            "found none"
        )
    if not hosts:
        raise UsageError(
            f"{path}: nccl-tests output without its '# Using devices' lines: the ranks and nodes are unknown"
        )
    said = named or _collective_in(path.name)
    if said is not None and collective is not None and said != _collective_in(collective):
        where = "its '# Collective test starting' line" if named else "its file name"
        raise UsageError(
            f"{path}: a log of {said} ({where}), but --collective asks for {collective}: "
            f"expected --collective {said}, or a log of {collective}"
        )
    name = said or collective
    if name is None:
        raise UsageError(
            f"{path}: which collective? neither the log nor the file name says: "
            f"expected --collective {'|'.join(COLLECTIVES)}, or a name like all_reduce_perf.log"
        )
    name = _check_collective(name, "--collective")
    per_host = Counter(hosts.values())
    return [
        Measurement(
            collective=name,
            bytes=size,
            world_size=len(hosts),
            nodes=len(per_host),
            ranks_per_node=max(per_host.values()),
            time_us=time_us,
            source=str(path),
            backend="nccl",
        )
        for _, size, time_us in rows
    ]


def _row(path: Path, number: int, raw: str, line: str, columns: list[str] | None) -> tuple[int, int, float]:
    """(line number, bytes, out-of-place time) of one table row; a UsageError naming the line otherwise."""
    shown = raw if len(raw) <= 80 else raw[:77] + "..."
    if columns is None or "time" not in columns:
        raise UsageError(
            f"{path}:{number}: not nccl-tests output: expected '#' comments, the column header or a result row, "
            f"found {shown!r}"
        )
    cells = line.split()
    at = columns.index("time")
    try:
        size, time_us = int(cells[0]), float(cells[at])
    except (ValueError, IndexError):
        raise UsageError(
            f"{path}:{number}: not an nccl-tests result row: expected {len(columns)} columns "
            f"(size, count, ..., time), found {shown!r}"
        ) from None
    if size < 0 or not time_us > 0:
        raise UsageError(f"{path}:{number}: expected a size >= 0 and a time > 0, found {shown!r}")
    return number, size, time_us


def read_comm_run(path: str | Path) -> list[Measurement]:
    """The collective benchmarks of one saved dpbench run (the comm suite's ``extra_info``)."""
    from dpbench.results.load import read_run

    run = read_run(path)
    out = []
    for bench in run.benchmarks:
        info = bench.get("extra_info") or {}
        if info.get("kind") != "collective" or info.get("collective") not in COLLECTIVES:
            continue
        world = int(info["world_size"])
        nodes = int(info.get("nodes") or 1)
        out.append(
            Measurement(
                collective=str(info["collective"]),
                bytes=int(info["size_bytes"]),
                world_size=world,
                nodes=nodes,
                ranks_per_node=int(info.get("ranks_per_node") or -(-world // nodes)),
                time_us=float(info["time_s"]) * 1e6,
                source=str(path),
                backend=str(info["backend"]) if info.get("backend") else None,
            )
        )
    if not out:
        raise UsageError(
            f"{path}: a saved run without collective benchmarks: expected a comm-suite run (suites/test_comm.py)"
        )
    return out


def read_measurements(paths: list[str | Path], *, collective: str | None = None) -> list[Measurement]:
    """Every measurement in ``paths``: a ``.json`` file is a saved dpbench run, anything else nccl-tests output."""
    out: list[Measurement] = []
    for path in paths:
        if Path(path).suffix == ".json":
            out += read_comm_run(path)
        else:
            out += read_nccl_tests(path, collective=collective)
    return out
