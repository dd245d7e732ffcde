"""Only what pyproject.toml cannot say: the packages, with the top-level ``suites/`` of a checkout
shipped inside the package as ``dpbench.suites`` (one copy, two names: ``pytest suites/`` and
``pytest --pyargs dpbench.suites``). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["dpbench", "dpbench.*"]), "dpbench.suites"],
    package_dir={"dpbench.suites": "suites"},
)
