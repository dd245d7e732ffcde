"""Every field a real saved run holds is documented on docs/schema.md.

The run is real: a quick-profile `scripts/bench` run of the 2-core development machine (68
benchmarks, every suite of the quick profile, 5 trials each), kept in tests/data/.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from _docs_pages import page

RUN = Path(__file__).resolve().parents[1] / "data" / "quick-run-disturbed-trial.json.gz"
SCHEMA = page("schema.md")


@pytest.fixture(scope="module")
def run() -> dict:
    with gzip.open(RUN) as f:
        return json.load(f)


def undocumented(keys, text: str = SCHEMA) -> list[str]:
    return sorted(k for k in set(keys) if f"`{k}`" not in text)


def union(dicts) -> set[str]:
    out: set[str] = set()
    for d in dicts:
        out |= set(d or {})
    return out


def test_the_run_is_a_whole_quick_run(run):
    suites = {b["extra_info"]["suite"] for b in run["benchmarks"]}
    assert suites == {"throughput", "scaling", "ddp_knobs", "allreduce", "dp_phases", "sharding", "comm"}


def test_every_extra_info_field_is_documented(run):
    extras = [b["extra_info"] for b in run["benchmarks"]]
    assert undocumented(union(extras)) == []
    assert undocumented(union(e["trials"] for e in extras)) == []
    assert undocumented(union(e.get("harness_settings") for e in extras)) == []


def test_every_machine_info_field_is_documented(run):
    assert undocumented(run["machine_info"]) == []
    assert undocumented(run["machine_info"]["dpbench"]) == []


def test_the_check_can_fail():
    assert undocumented({"schema", "no_such_field"}) == ["no_such_field"]
