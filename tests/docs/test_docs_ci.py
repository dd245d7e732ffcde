"""docs/ci.md explains the real workflow: every line of its YAML excerpts is in
.github/workflows/gpu-benchmarks.yml, and what it says the workflow does is what the file says."""

from __future__ import annotations

import re

import yaml
from _docs_pages import ROOT, flat, page

WORKFLOW_PATH = ROOT / ".github" / "workflows" / "gpu-benchmarks.yml"
WORKFLOW = WORKFLOW_PATH.read_text()
CI = page("ci.md")


def yaml_blocks(text: str) -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```", text, flags=re.S | re.M)


def missing_lines(block: str, workflow: str = WORKFLOW) -> list[str]:
    """Lines of ``block`` (comments kept, indentation ignored) that the workflow does not contain."""
    have = {line.strip() for line in workflow.splitlines()}
    return [line.strip() for line in block.splitlines() if line.strip() and line.strip() not in have]


def test_every_yaml_excerpt_is_in_the_workflow():
    blocks = yaml_blocks(CI)
    assert len(blocks) >= 3
    for block in blocks:
        assert missing_lines(block) == [], "docs/ci.md quotes lines the workflow does not have"


def test_the_excerpt_check_can_fail():
    assert missing_lines("env:\n  THRESHOLD: 7%\n") == ["THRESHOLD: 7%"]


def test_the_documented_threshold_and_commands_are_the_workflows():
    env = yaml.safe_load(WORKFLOW)["env"]
    assert f"`THRESHOLD: {env['THRESHOLD']}`" in CI
    assert f"`AB_TRIALS` times ({env['AB_TRIALS']})" in flat(CI)
    steps = {s.get("name"): s for s in yaml.safe_load(WORKFLOW)["jobs"]["benchmarks"]["steps"]}
    ab = next(s for n, s in steps.items() if n and n.startswith("A/B against the base branch"))
    assert ab["if"] == "github.event_name == 'pull_request'" and 'dpbench ab "origin/$BASE_REF" HEAD' in ab["run"]
    compare = next(s for n, s in steps.items() if n and n.startswith("Compare against the baseline"))
    assert "pull_request" in compare["if"] and "!=" in compare["if"] and '"$BASELINE"' in compare["run"]
    assert "--fail-on-new 2" in WORKFLOW and "--fail-on-new 2" in CI
