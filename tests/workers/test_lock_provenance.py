"""A saved run claims the lock's hash only where the installed versions are the lock's: an image's
own torch (gpu-check on a machine without network) is recorded as the versions found."""

from __future__ import annotations

from importlib import metadata

from dpbench.workers import machine


def test_drift_names_each_pinned_package_installed_at_another_version(tmp_path):
    torch_base = metadata.version("torch").split("+")[0]
    lock = tmp_path / "constraints.txt"
    lock.write_text(
        "# a comment\n"
        f"torch=={torch_base}  # the local tag (+cpu, +cu128) is no difference\n"
        "pytest==0.0.1\n"
        "no-such-package-here==1.0\n"
    )
    assert machine.lock_drift(lock) == {"pytest": metadata.version("pytest")}
    assert machine.lock_drift(tmp_path / "missing.txt") == {}


def test_the_hash_is_recorded_only_when_the_lock_holds(monkeypatch):
    monkeypatch.setattr(machine, "lock_drift", lambda: {"torch": "2.9.1+cu128"})
    assert machine._provenance("0.1.0") == {
        "version": "0.1.0",
        "lock_hash": None,
        "lock_drift": {"torch": "2.9.1+cu128"},
    }
    monkeypatch.setattr(machine, "lock_drift", lambda: {})
    assert machine._provenance("0.1.0") == {"version": "0.1.0", "lock_hash": machine.lock_file_hash()}
