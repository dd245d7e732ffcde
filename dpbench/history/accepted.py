"""Accepted changes: a checked-in TOML file marking a change in a benchmark's history as intended.

```toml
[[accepted]]
benchmark = "test_throughput[*lenet*]"   # pattern on the pytest name (or full name): * and ? wild, [ ] literal
commit = "1a2b3c4"                        # the commit that made the change (a prefix of 7+ hex digits)
reason = "LeNet now checks its gradients every step (#123)"
machine = "gpu-runner-*"                  # optional pattern on the machine; default: every machine
```

A change matches an entry when the benchmark (and machine) match and the entry's commit lies in
the change's commit range (after the last commit measured before it, up to the first after).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpbench.results.load import ResultsError

__all__ = ["ACCEPTED_FILE", "Accepted", "read_accepted"]

ACCEPTED_FILE = Path("results/accepted.toml")


@dataclass(frozen=True, kw_only=True)
class Accepted:
    benchmark: str
    commit: str
    reason: str
    machine: str = "*"

    def matches(self, name: str, fullname: str, machine: str) -> bool:
        return (_glob(self.benchmark, name) or _glob(self.benchmark, fullname)) and _glob(self.machine, machine)

    def is_commit(self, commit: str) -> bool:
        return commit.lower().startswith(self.commit)


def _glob(pattern: str, text: str) -> bool:
    """``*`` and ``?`` are wildcards; everything else is literal, brackets included (pytest names
    are full of them: fnmatch would read ``[ddp-mlp-w2]`` as a character class)."""
    regex = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.fullmatch(regex, text) is not None


def _entry(path: Path, index: int, raw: Any) -> Accepted:
    where = f"{path}: accepted entry #{index + 1}"
    if not isinstance(raw, dict):
        raise ResultsError(f"{where}: expected a table, found {type(raw).__name__}")
    unknown = sorted(set(raw) - {"benchmark", "commit", "reason", "machine"})
    if unknown:
        raise ResultsError(f"{where}: unknown keys {', '.join(unknown)} (expected benchmark, commit, reason, machine)")
    for key in ("benchmark", "commit", "reason"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ResultsError(f"{where}: {key!r}: expected a non-empty string, found {raw.get(key)!r}")
    commit = raw["commit"].strip().lower()
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise ResultsError(f"{where}: 'commit': expected 7 to 40 hex digits, found {raw['commit']!r}")
    machine = raw.get("machine", "*")
    if not isinstance(machine, str) or not machine:
        raise ResultsError(f"{where}: 'machine': expected a pattern string, found {machine!r}")
    return Accepted(benchmark=raw["benchmark"].strip(), commit=commit, reason=raw["reason"].strip(), machine=machine)


def read_accepted(path: str | os.PathLike | None) -> list[Accepted]:
    """The entries of an accepted-changes file; none when ``path`` is None or (the default
    file) absent. TOML is parsed with the standard library's ``tomllib`` (Python 3.11+)."""
    if path is None:
        return []
    path = Path(path)
    if not path.exists():
        return []
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise ResultsError(f"{path}: reading accepted changes needs Python 3.11 or newer (tomllib)") from None
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ResultsError(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ResultsError(f"{path}: not valid TOML ({e})") from None
    entries = doc.get("accepted", [])
    if not isinstance(entries, list):
        raise ResultsError(
            f"{path}: 'accepted': expected an array of tables ([[accepted]]), found {type(entries).__name__}"
        )
    return [_entry(path, i, raw) for i, raw in enumerate(entries)]
