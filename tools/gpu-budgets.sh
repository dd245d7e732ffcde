# shellcheck shell=bash disable=SC2034 # sourced: the scripts that source it read these
# The seconds of one call to a lent GPU machine, and how tools/gpu-session and tools/gpu-check share
# them: both source this file, and tests/test_gpu_check.py checks from these same values that the
# first pass, every step's kill grace and the facts' worst case fit one call. Each step's budget is
# an estimate for a cold machine; its arithmetic is in docs/gpu.md ("How the budgets were sized").

CALL_S=600        # one device call: past this the whole call is killed (SIGKILL)
SESSION_TAIL_S=10 # gpu-session after gpu-check: stop the packer, pack the folder once more, copy the archive
CHECK_GRACE_S=15  # the kill grace of the timeout gpu-session puts around gpu-check
FACTS_S=80        # the facts, all of them (each fact has a limit of its own besides)
FACT_GRACE_S=5    # the kill grace of each fact's timeout: the facts end within FACTS_S and one grace
STEP_GRACE_S=10   # the kill grace of each gpu-check step's timeout
ARCHIVE_S=10      # gpu-check packing its folder into the archive when it ends
MIN_STEP_S=10     # under --within, a step left less time than this is not started (a SKIP line)

# In the order they run: what answers the most first.
FIRST_STEPS="inventory smoke compile traces report"
SECOND_STEPS="gpu-tests convergence gradscaler suites compare predict report-ab"
# The last step of each pass: under --within the steps before it leave it its whole budget.
CLOSING_STEPS="report report-ab"

declare -A STEP_S=(
    [inventory]=40
    [smoke]=200
    [compile]=100
    [traces]=65
    [report]=25
    [gpu-tests]=280
    [convergence]=120
    [gradscaler]=30
    [suites]=240
    [compare]=90
    [predict]=20
    [report-ab]=30
)
