"""The fast tier's guard (tests/conftest.py): an unmarked test over the limit fails, a slow one passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")


@pytest.fixture
def tiered(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text().split("# ---- report fixtures ----")[0])
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(
        test_sleepy="""
        import time
        import pytest

        def test_unmarked_sleeper():
            time.sleep(0.3)

        @pytest.mark.slow
        def test_marked_sleeper():
            time.sleep(0.3)

        def test_quick():
            pass
    """
    )
    return pytester


@pytest.mark.slow  # an inner pytest session: ~2 s idle
def test_an_unmarked_test_over_the_limit_fails_and_names_its_time(tiered: pytest.Pytester, monkeypatch):
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine: the limit as given
    result = tiered.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "--unmarked-limit", "0.1")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*test_unmarked_sleeper took 0.* s but is not marked slow (limit 0.1 s for the fast tier)*"]
    )


@pytest.mark.slow
def test_the_limit_stretches_with_the_machines_load(tiered: pytest.Pytester, monkeypatch):
    cores = __import__("os").cpu_count() or 1
    monkeypatch.setattr("os.getloadavg", lambda: (10.0 * cores, 0.0, 0.0))  # 10× oversubscribed
    tiered.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "--unmarked-limit", "0.1").assert_outcomes(
        passed=3
    )


@pytest.mark.slow
def test_the_limit_can_be_switched_off(tiered: pytest.Pytester):
    tiered.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "--unmarked-limit", "0").assert_outcomes(passed=3)


@pytest.mark.slow  # an inner pytest on two xdist workers: ~4 s idle
def test_a_serial_test_runs_while_no_other_test_runs_under_xdist(pytester: pytest.Pytester, tmp_path: Path):
    pytester.makeconftest(CONFTEST.read_text().split("# ---- report fixtures ----")[0])
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    serial: serial\n")
    log = tmp_path / "spans.jsonl"
    pytester.makepyfile(
        test_spans=f"""
        import json
        import time
        import pytest

        def _span(name):
            start = time.monotonic()
            time.sleep(0.3)
            with open({str(log)!r}, "a") as f:
                f.write(json.dumps([name, start, time.monotonic()]) + "\\n")

        @pytest.mark.parametrize("i", range(8))
        def test_plain(i):
            _span(f"plain{{i}}")

        @pytest.mark.serial
        @pytest.mark.parametrize("i", range(3))
        def test_serial(i):
            _span(f"serial{{i}}")
    """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:benchmark", "-n", "2", "--dist", "load")
    result.assert_outcomes(passed=11)
    spans = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(spans) == 11

    def overlap(a, b):
        return a[1] < b[2] and b[1] < a[2]

    plain = [s for s in spans if s[0].startswith("plain")]
    serial = [s for s in spans if s[0].startswith("serial")]
    # The two workers did run plain tests at once (what the check below would catch) ...
    assert any(overlap(a, b) for i, a in enumerate(plain) for b in plain[i + 1 :])
    # ... and never beside a serial one.
    assert [(s[0], o[0]) for s in serial for o in spans if o is not s and overlap(s, o)] == []


class _Item:
    """What the ordering reads of a collected test: its file and its markers."""

    def __init__(self, path, name, slow=False, serial=False):
        self.path, self.name, self._slow, self._serial = Path(path), name, slow, serial

    def get_closest_marker(self, name):
        return object() if (name == "slow" and self._slow) or (name == "serial" and self._serial) else None


def test_under_xdist_the_heaviest_files_go_first_and_each_keeps_its_order(monkeypatch):
    import conftest

    items = [
        _Item("a.py", "a1"),
        _Item("a.py", "a2"),  # 0.2
        _Item("b.py", "b1", slow=True),
        _Item("b.py", "b2"),  # 5.1
        _Item("c.py", "c1", slow=True),
        _Item("c.py", "c2", slow=True),  # 10
        _Item("d.py", "d1"),
        _Item("d.py", "d2"),
    ]  # 0.2, after a: ties keep the collected order
    monkeypatch.setattr(conftest, "XDIST_WORKERS", 2)
    reordered = list(items)
    conftest.pytest_collection_modifyitems(None, reordered)
    assert [i.name for i in reordered] == ["c1", "c2", "b1", "b2", "a1", "a2", "d1", "d2"]
    monkeypatch.setattr(conftest, "XDIST_WORKERS", 1)  # one process: as collected
    same = list(items)
    conftest.pytest_collection_modifyitems(None, same)
    assert same == items


def test_under_xdist_the_files_with_a_serial_test_go_first_their_serial_tests_leading(monkeypatch):
    import conftest

    items = [
        _Item("heavy.py", "h1", slow=True),
        _Item("heavy.py", "h2", slow=True),  # 10: first by weight alone
        _Item("bounds.py", "b1"),
        _Item("bounds.py", "b2", slow=True, serial=True),  # 5.1
        _Item("bounds.py", "b3", serial=True),
        _Item("light.py", "l1"),
        _Item("watch.py", "w1", slow=True),
        _Item("watch.py", "w2", slow=True),
        _Item("watch.py", "w3", serial=True),  # 10.1
    ]
    monkeypatch.setattr(conftest, "XDIST_WORKERS", 2)
    conftest.pytest_collection_modifyitems(None, items)
    # The serial files first, heaviest first, each with its serial tests leading in their own order;
    # then the rest, heaviest first, as before.
    assert [i.name for i in items] == ["w3", "w1", "w2", "b2", "b3", "b1", "h1", "h2", "l1"]
