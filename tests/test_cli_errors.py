"""Every mistake argparse catches on the command line is one line on stderr, exit 2: the option as the
user typed it, what was expected, what was found, and the closest name where one is close — no usage
block. The handlers' own checks are tested with their subcommand (tests/runner, tests/ab)."""

from __future__ import annotations

import pytest

from dpbench.cli import main

COMMANDS = "report, compare, list, ab, history, runs, run, estimate, predict"


@pytest.mark.parametrize(
    "argv, line",
    [
        (["run", "--trials", "-1"], "dpbench run: error: --trials: expected an int >= 1, found '-1'"),
        (["run", "--trials", "0"], "dpbench run: error: --trials: expected an int >= 1, found '0'"),
        (["run", "--profile", "quik"],
         "dpbench run: error: --profile: expected one of quick, full, found 'quik' (did you mean 'quick'?)"),
        (["run", "--device", "gpu"],
         "dpbench run: error: --device: expected one of cpu, cuda, found 'gpu' (did you mean 'cpu'?)"),
        (["run", "--save"], "dpbench run: error: --save: expected a value (NAME), found none"),
        (["run", "--trails", "3"],
         "dpbench run: error: unrecognized arguments: --trails (did you mean '--trials'?)"),
        (["estimate"], "dpbench estimate: error: --workload: required, expected a value (SPEC), found none"),
        (["estimate", "--workload", "mlp", "--global-batch", "-3"],
         "dpbench estimate: error: --global-batch: expected an int >= 1, found '-3'"),
        (["history", "--fail-on-new", "x"], "dpbench history: error: --fail-on-new: expected an int, found 'x'"),
        (["report", "-o"], "dpbench report: error: -o/--output: expected a value (FILE), found none"),
        (["list", "--jsn", "x"], "dpbench list: error: unrecognized arguments: --jsn x (did you mean '--json'?)"),
        (["--no-colr", "list"], "dpbench list: error: unrecognized arguments: --no-colr (did you mean '--no-color'?)"),
        (["lst"], f"dpbench: error: COMMAND: expected one of {COMMANDS}, found 'lst' (did you mean 'list'?)"),
        ([], f"dpbench: error: COMMAND: required, expected one of {COMMANDS}, found none"),
    ],
)  # fmt: skip
def test_a_usage_error_is_one_line_naming_the_option(capsys, argv, line):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == line + "\n"


def test_a_value_that_starts_like_a_negative_number_reaches_the_options_own_check(capsys):
    # argparse alone takes -5GB for an option and says "expected one argument".
    assert main(["estimate", "--workload", "mlp", "--device-memory", "-5GB"]) == 2
    assert capsys.readouterr().err == (
        "dpbench estimate: error: --device-memory: expected a positive size such as 80GB, 80 GiB or 8e10 (bytes), "
        "found '-5GB'\n"
    )
    assert main(["run", "--world-sizes", "-1,2"]) == 2
    assert (
        capsys.readouterr().err
        == "dpbench run: error: --world-sizes: expected comma-separated ints >= 1, found '-1,2'\n"
    )


def test_an_option_given_no_value_before_the_next_option_still_says_so(capsys):
    # Only a value like a negative number is taken as the value: the next option is not swallowed.
    assert main(["estimate", "--workload", "--strategies", "ddp"]) == 2
    assert capsys.readouterr().err == "dpbench estimate: error: --workload: expected a value (SPEC), found none\n"
