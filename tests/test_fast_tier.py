"""The fast tier's guard (tests/conftest.py): an unmarked test over the limit fails, a slow one passes."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")


@pytest.fixture
def tiered(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text().split("# ---- report fixtures ----")[0])
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(test_sleepy='''
        import time
        import pytest

        def test_unmarked_sleeper():
            time.sleep(0.3)

        @pytest.mark.slow
        def test_marked_sleeper():
            time.sleep(0.3)

        def test_quick():
            pass
    ''')
    return pytester


@pytest.mark.slow  # an inner pytest session: ~2 s idle
def test_an_unmarked_test_over_the_limit_fails_and_names_its_time(tiered: pytest.Pytester, monkeypatch):
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine: the limit as given
    result = tiered.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "--unmarked-limit", "0.1")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_unmarked_sleeper took 0.* s but is not marked slow (limit 0.1 s for the fast tier)*"])


@pytest.mark.slow
def test_the_limit_stretches_with_the_machines_load(tiered: pytest.Pytester, monkeypatch):
    cores = __import__("os").cpu_count() or 1
    monkeypatch.setattr("os.getloadavg", lambda: (10.0 * cores, 0.0, 0.0))  # 10× oversubscribed
    tiered.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "--unmarked-limit", "0.1").assert_outcomes(passed=3)


@pytest.mark.slow
def test_the_limit_can_be_switched_off(tiered: pytest.Pytester):
    tiered.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "--unmarked-limit", "0").assert_outcomes(passed=3)
