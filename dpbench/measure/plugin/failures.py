"""How a case whose workers failed is reported: one line — the case, the ranks, the exception and the
innermost frame of the user's own code — and the full worker traceback in a file under the
results directory, which the line names. pytest's report of the case becomes that line; with
``-v`` pytest's own traceback stays and the line is added to it.

Only a worker's failure is shortened (:class:`dpbench.workers.WorkerError`: the user's model
raised, a rank died or went silent): an error of dpbench's own in the parent keeps its traceback.
"""

from __future__ import annotations

import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Frame",
    "failure_files",
    "failure_line",
    "first_failure_line",
    "innermost_frame",
    "library_roots",
    "raised",
    "traceback_path",
    "write_traceback",
]

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
# The last line of a Python traceback: the exception's type (maybe dotted) and its message.
_RAISED = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")


@dataclass(frozen=True, kw_only=True)
class Frame:
    """One frame of a traceback as Python prints it."""

    path: str
    line: int
    function: str
    source: str
    """the frame's source line, stripped ('' when the traceback does not show it)"""

    def __str__(self) -> str:
        where = f"{self.path}:{self.line} in {self.function}"
        return f"{where}: {self.source}" if self.source else where


def library_roots() -> tuple[str, ...]:
    """Where code that is not the user's lives: dpbench (its package and its suites), the
    interpreter's standard library and the installed packages (torch, transformers, …)."""
    from dpbench.measure.plugin.selection import suites_dir

    paths = sysconfig.get_paths()
    package = Path(__file__).resolve().parents[2]  # dpbench/ (this is dpbench/measure/plugin/failures.py)
    roots = {str(package), str(suites_dir())}
    roots |= {str(Path(paths[k]).resolve()) for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
    return tuple(sorted(roots))


def innermost_frame(traceback: str, roots: tuple[str, ...]) -> tuple[Frame | None, bool]:
    """The innermost frame outside ``roots`` (the user's own code) and True; else the innermost
    frame of all and False; (None, False) for a text with no frames (a rank that died)."""
    lines = traceback.splitlines()
    frames = []
    for i, text in enumerate(lines):
        match = _FRAME.match(text)
        if match is None:
            continue
        following = lines[i + 1] if i + 1 < len(lines) else ""
        source = "" if _FRAME.match(following) or not following.startswith("    ") else following.strip()
        frames.append(Frame(path=match["path"], line=int(match["line"]), function=match["func"], source=source))
    if not frames:
        return None, False
    for frame in reversed(frames):
        resolved = str(Path(frame.path).resolve()) if frame.path.startswith("/") else frame.path
        if not frame.path.startswith("<") and not any(resolved.startswith(root + "/") for root in roots):
            return frame, True
    return frames[-1], False


def raised(traceback: str) -> str:
    """``Type: message`` of the exception a traceback ends in; the text's last line when it is not
    one (how a rank died: "died with exit code -9")."""
    lines = [line for line in traceback.strip().splitlines() if line.strip()]
    if not lines:
        return "failed without a message"
    for line in reversed(lines):
        if not line.startswith((" ", "\t")) and _RAISED.match(line) and not line.startswith("Traceback"):
            return line.strip()
    return lines[-1].strip()


def failure_line(case: str, error: BaseException, *, traceback_file: Path | None, roots: tuple[str, ...]) -> str:
    """The one line for ``case`` whose workers failed with ``error`` (a WorkerError)."""
    rank = getattr(error, "rank", None)
    text = getattr(error, "failures", {}).get(rank, "") or str(error)
    frame, own = innermost_frame(text, roots)
    # Who failed as the pool names them ("worker rank 1 (node 1, host b12) failed (world_size=2)").
    who = (str(error).splitlines() or [""])[0].rstrip(":").strip() or f"worker rank {rank} failed"
    line = f"{case}: {who}: {raised(text)}"
    if frame is not None:
        line += f" — {'in your code at' if own else 'at'} {frame}"
    if traceback_file is not None:
        line += f" (the full traceback: {traceback_file})"
    return line


def traceback_path(directory: Path, name: str) -> Path:
    """Where :func:`write_traceback` writes the failure of case ``name``."""
    return directory / f"{re.sub(r'[^A-Za-z0-9_.=@-]+', '_', name)}.txt"


def write_traceback(directory: Path, name: str, heading: str, error: BaseException, *, line: str = "") -> Path:
    """The failure's whole text — ``line`` (the one line pytest shows, where given), ``heading``,
    every failing rank's traceback and the notes — in ``directory/<name>.txt``; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = traceback_path(directory, name)
    notes = "".join(f"\n{note}" for note in getattr(error, "__notes__", ()))
    said = f"{line}\n\n" if line else ""
    path.write_text(f"{said}{heading}\n\n{error}{notes}\n")
    return path


def failure_files(storage: Path) -> set[Path]:
    """The failure files under a results directory (``<machine>/failures/<run id>/<case>.txt``): what
    ``dpbench run`` reads back to say what failed when a session saved nothing."""
    return set(storage.glob("*/failures/*/*.txt"))


def first_failure_line(paths: list[Path]) -> str:
    """The one line of the earliest-written of ``paths`` (its first line); '' for none."""
    if not paths:
        return ""
    first = min(paths, key=lambda path: path.stat().st_mtime_ns)
    return (first.read_text().splitlines() or [""])[0]
