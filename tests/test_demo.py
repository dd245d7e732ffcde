"""The demo the README points to (python -m dpbench.demo): it must agree and exit 0."""

from __future__ import annotations

import re

from dpbench.demo import main


def test_demo_trains_identically_under_dataparallel(capsys):
    assert main(["--steps", "3", "--batch", "9"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+", out, flags=re.M)
    assert [int(r[0]) for r in rows] == [0, 1, 2]
    for _, plain, dp in rows:
        assert abs(float(plain) - float(dp)) < 1e-5
    diff = float(re.search(r"max \|parameter difference\| after 3 steps: (\S+)", out).group(1))
    assert diff < 1e-5
