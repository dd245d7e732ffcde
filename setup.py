"""Only what pyproject.toml cannot say: the packages, with the top-level ``suites/`` of a checkout
shipped inside the package as ``dpbench.suites`` (one copy, two names: ``pytest suites/`` and
``pytest --pyargs dpbench.suites``). Everything else is in pyproject.toml.

``dpbench.report.templates`` holds no Python, only the report's templates: it is listed by name
because ``find_packages`` finds only folders with an ``__init__.py``, and setuptools warns about
(and will one day drop) package data in a folder that is not a listed package. Its files are the
package data declared in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["dpbench", "dpbench.*"]), "dpbench.report.templates", "dpbench.suites"],
    package_dir={"dpbench.suites": "suites"},
)
