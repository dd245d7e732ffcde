"""``validation.session_offset``: the fit on two stored real sessions of one commit (taken beside
other engineers' test suites: a large between-session term, as expected there), and the sessions it
starts, with ``dpbench run`` stood in for."""

from __future__ import annotations

import gzip
import importlib
import subprocess
import tempfile
from pathlib import Path

GATE_DATA = Path(__file__).resolve().parents[1] / "gate" / "data"


def _sessions(tmp_path) -> list[Path]:
    paths = []
    for name in ("base", "same"):
        path = tmp_path / f"0001_{name}.json"
        path.write_bytes(gzip.decompress((GATE_DATA / f"aa-contended-{name}.json.gz").read_bytes()))
        paths.append(path)
    return paths


def test_session_offset_fits_the_between_session_term_per_configuration(tmp_path, capsys):
    module = importlib.import_module("validation.session_offset")
    assert module.main(["--runs", *map(str, _sessions(tmp_path))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "| configuration | × single per session | between-session sd of the log ratio |"
    assert "| mlp · ddp w2 | 1.91 / 4.24 | 0.245 |" in out
    assert out[-1] == "pooled over 6 configurations: 0.489"


def test_session_offset_runs_the_scaling_suite_at_one_rank_per_session(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    module = importlib.import_module("validation.session_offset")
    stored = _sessions(tmp_path)
    commands = []

    def fake_run(cmd):
        commands.append(cmd)
        i = len(commands)
        saved = Path(cmd[cmd.index("--results") + 1]) / "machine" / f"000{i}_s{i}.json"
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_bytes(stored[i - 1].read_bytes())
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(module.subprocess, "run", fake_run)
    assert module.main(["--sessions", "2", "--", "--max-trials", "8"]) == 0
    (work,) = tmp_path.glob("dpbench-sessions-*")
    assert [c[c.index("run") :] for c in commands] == [
        ["run", "--device", "cpu", "--workload", "mlp", "--suites", "scaling", "--world-sizes", "1"]
        + ["--results", str(work / "results"), "--save", f"s{i}", "--report", str(work / f"report{i}.html")]
        + ["--max-trials", "8"]
        for i in (1, 2)
    ]
    assert capsys.readouterr().out.splitlines()[-1] == "pooled over 6 configurations: 0.489"
