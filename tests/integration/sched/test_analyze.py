"""A burst of submits into a small jobs table: the scheduler's gateway runs
ANALYZE jobs once the rows changed since the table's statistics reach
--analyze-min-rows and outnumber the rows those statistics counted, so
that the gateway's prepared statements (generic plans) are planned again
for the table's size. The scale bench found the claim and the results
scanning all of jobs on plans made for an empty table until autovacuum
came by (README, Scale). The module has a stack of its own, its gateway
set to analyze after 100 rows."""

import pytest

import stack as stk

STACK_GATEWAY_ENV = {"KOWLOON_ANALYZE_MIN_ROWS": "100"}


@pytest.fixture(scope="module")
def stack(own_stack):
    return own_stack


def analyses(stack):
    """(ANALYZEs run by a client on jobs, rows changed since the last one)."""
    a, m = stack.psql("SELECT analyze_count, n_mod_since_analyze FROM pg_stat_user_tables"
                      " WHERE relname = 'jobs'")[0]
    return int(a), int(m)


@pytest.mark.timeout(120)
def test_a_burst_into_a_small_jobs_table_is_analyzed_by_the_gateway(A, stack):
    before, _ = analyses(stack)
    # below the threshold nothing happens (two of the scheduler's looks)
    for _ in range(20):
        A.submit("sleep", {"seconds": 0})
    stk.wait_until(lambda: analyses(stack)[1] >= 20, 20, 0.2, "the 20 inserts counted")
    with pytest.raises(stk.StackError):
        stk.wait_until(lambda: analyses(stack)[0] > before, 12, 0.5, "an ANALYZE")
    # past it: the gateway analyzes within its 10 s period
    for _ in range(120):
        A.submit("sleep", {"seconds": 0})
    stk.wait_until(lambda: analyses(stack)[0] > before, 30, 0.5, "the gateway's ANALYZE of jobs")
    with open(stack.procs["gateway"].log_path) as f:
        assert "analyzed jobs" in f.read()
