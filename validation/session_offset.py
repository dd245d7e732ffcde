"""How far a fresh session moves each configuration's ratio to single: the term a claim about a
configuration — not about one session — would have to carry (docs/decision.md#sessions says why
claims say "in this session" instead). Runs N ``dpbench run`` sessions of the scaling suite at one
rank back to back on a quiet machine (or reads saved runs), and per configuration fits the
between-session sd of its log ratio to single beyond what its own pairs' spread explains.

    .venv/bin/python -m validation.session_offset [--sessions 4] [--workload mlp] [-- RUN_ARGS]
    .venv/bin/python -m validation.session_offset --runs RUN1.json RUN2.json ...   # fit, run nothing

Per configuration c and session r: ``L_cr``, the log of the paired ratio to single (the median of
the per-pair ratios, :func:`dpbench.stats.paired_ratio`), and ``v_cr``, its sampling variance within
the session (π/2 · s²/n, s the pairs' robust log sd: the median's variance at n pairs). The
between-session variance of the ratio is ``max(0, var_r(L_cr) - mean_r(v_cr))``; its root, printed
per configuration, is what an interval about the configuration would widen by (in log units, one sd).
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class SessionOffset:
    """One configuration's ratio to single across sessions."""

    configuration: str
    ratios: tuple[float, ...]
    """Its paired ratio to single in each session."""
    between_sd: float
    """The between-session sd of the log ratio beyond the within-session sampling spread."""


def _log_ratio(mine: Sequence[float], single: Sequence[float]) -> tuple[float, float]:
    """The log paired ratio and its within-session sampling variance (NaN with fewer than 2 pairs)."""
    from dpbench.stats import paired_ratio

    r = paired_ratio(mine, single)
    logs = [math.log(x) for x in r.ratios]
    if len(logs) < 2:
        return math.nan, math.nan
    centre = statistics.median(logs)
    s = 1.4826 * statistics.median(abs(x - centre) for x in logs)
    return math.log(r.ratio), math.pi / 2 * s * s / len(logs)


def per_session(paths: Sequence[Path]) -> dict[str, list[tuple[float, float]]]:
    """Per configuration (``workload · ddp w1``), per session in order: (log ratio to single, its
    sampling variance), from each saved run's configurations at single's batch."""
    from dpbench.decision.configs import configurations, single_for, throughputs
    from dpbench.results.frame import runs_frame
    from dpbench.results.load import read_run

    out: dict[str, list[tuple[float, float]]] = {}
    for path in paths:
        configs = configurations(runs_frame([read_run(path)]))
        singles = single_for(configs)
        for _, row in configs.iterrows():
            key = (str(row["run"]), str(row["workload"]), float(row["batch"]) if row["batch"] == row["batch"] else -1.0)
            single = singles.get(key)
            if single is None or row["strategy"] == "single":
                continue
            ratio, var = _log_ratio(throughputs(row), throughputs(single))
            if math.isfinite(ratio):
                out.setdefault(f"{row['workload']} · {row['config']}", []).append((ratio, var))
    return out


def fit(paths: Sequence[Path]) -> list[SessionOffset]:
    """Every configuration measured in two or more of the sessions ``paths`` (saved runs, in order)."""
    out = []
    for name, readings in per_session(paths).items():
        if len(readings) < 2:
            continue
        logs = [x for x, _ in readings]
        excess = statistics.variance(logs) - statistics.fmean(v for _, v in readings)
        out.append(
            SessionOffset(
                configuration=name,
                ratios=tuple(math.exp(x) for x in logs),
                between_sd=math.sqrt(max(0.0, excess)),
            )
        )
    return out


def run_sessions(sessions: int, workload: str, rest: list[str]) -> list[Path] | int:
    """``sessions`` runs of the scaling suite at one rank, back to back: their saved runs, or the
    exit code of the first that failed."""
    work = Path(tempfile.mkdtemp(prefix="dpbench-sessions-"))
    paths = []
    for i in range(1, sessions + 1):
        cmd = [sys.executable, "-m", "dpbench.cli", "run", "--device", "cpu", "--workload", workload]
        cmd += ["--suites", "scaling", "--world-sizes", "1", "--results", str(work / "results")]
        cmd += ["--save", f"s{i}", "--report", str(work / f"report{i}.html"), *[a for a in rest if a != "--"]]
        code = subprocess.run(cmd).returncode
        if code != 0:
            print(f"session {i} exited {code}", file=sys.stderr)
            return code
        (saved,) = sorted((work / "results").glob(f"*/*_s{i}.json"))
        paths.append(saved)
    print(f"{sessions} sessions in {work}")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--runs", nargs="+", metavar="FILE", help="saved runs of one commit, in order: fit them")
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.runs:
        paths = [Path(p) for p in args.runs]
        missing = [str(p) for p in paths if not p.is_file()]
        if len(paths) < 2 or missing:
            parser.error(f"--runs: expected 2 or more saved runs, found {len(paths)} ({', '.join(missing)} missing)")
    else:
        if args.sessions < 2:
            parser.error(f"--sessions: expected at least 2, found {args.sessions}")
        done = run_sessions(args.sessions, args.workload, args.rest)
        if isinstance(done, int):
            return done
        paths = done
    found = fit(paths)
    print("| configuration | × single per session | between-session sd of the log ratio |")
    print("|---|---|---|")
    for s in found:
        print(f"| {s.configuration} | {' / '.join(f'{r:.2f}' for r in s.ratios)} | {s.between_sd:.3f} |")
    if found:
        pooled = math.sqrt(statistics.fmean(s.between_sd**2 for s in found))
        print(f"pooled over {len(found)} configurations: {pooled:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
