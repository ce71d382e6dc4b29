"""Fixtures of the integration suite: a private stack (PostgreSQL, Redis,
gateway, nodes node-a and node-b) shared by the tests of one pytest process,
API clients for tenants A and B and an admin, and a per-test time limit so
that nothing hangs. On failure the tails of every daemon log are printed at
the end.

Under pytest-xdist (`-n N`, scripts/test.sh) every worker is its own process
with its own stack on its own ports, and whole files go to one worker
(`--dist loadfile`), so a test file runs in its order as it would alone.
A test that kills, freezes or cuts off the stack's daemons is marked
`destructive` and gets a stack of its own for its module (the `own_stack`
fixture, through a module-level `stack` override), so that no other test
depends on where the file name sorts."""

import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
pytest.register_assert_rewrite("stack")

import stack as stk  # noqa: E402

TEST_TIMEOUT_S = int(os.environ.get("KOWLOON_TEST_TIMEOUT_S", "60"))

SESSION_BUDGET_S = int(os.environ.get("KOWLOON_TEST_SESSION_S", "1200"))

# failures: tests failed so far in this process (a stack keeps its log
# tails when the count moved while it ran); stacks: the running ones (SIGTERM
# stops them); tails, roots: log tails to print and kept stack directories,
# this process's and, on the xdist controller, its workers'
_state = {"failures": 0, "stacks": [], "tails": [], "roots": [],
          "timeouts": 0, "t0": time.monotonic()}


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout(seconds): per-test time limit")
    config.addinivalue_line(
        "markers", "destructive: kills, freezes or cuts off the stack's daemons; the module "
        "must use a stack of its own (a module-scoped `stack` fixture returning own_stack)")
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame):
    """The daemons live in their own sessions: stop them before dying."""
    for s in list(_state["stacks"]):
        s.close()
    os._exit(143)


# The files that take longest, longest first (their wall time in a run of
# the whole suite on 6 workers, pytest --durations=0, 2026-12-05: 97 s for
# the first, 23 s for the last): on xdist workers they are handed out
# first, so that none of them is what one worker still runs while the
# others are done. Files not named (new ones too) follow in their usual
# order. Basenames: the files live in the rooms below (jobs/, cluster/,
# ...), each name once.
HEAVY_FIRST = ("test_task_clients.py", "test_datapath.py", "test_faults.py", "test_events.py",
               "test_tasks.py", "test_ui.py", "test_node_loss.py", "test_webhooks.py",
               "test_task_node.py", "test_task_gang.py", "test_multinode_run.py",
               "test_multinode.py", "test_gpu_run_sh.py", "test_sdk.py", "test_analyze.py",
               "test_http_abuse.py", "test_result_stream.py", "test_cluster_auth.py",
               "test_fair_share.py", "test_task_ui.py", "test_access.py", "test_rate_buckets.py",
               "test_slurm.py")


def pytest_collection_modifyitems(session, config, items):
    """On an xdist worker, puts the heavy files first (every worker sorts
    the same way, as xdist requires). Then refuses to run a destructive test
    on the shared stack: it would break the tests after it on its worker."""
    if hasattr(config, "workerinput"):
        rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable
    for item in items:
        if item.get_closest_marker("destructive") is None:
            continue
        defs = item._fixtureinfo.name2fixturedefs.get("stack")
        if defs and defs[-1].scope == "session":
            raise pytest.UsageError(
                f"{item.nodeid} is marked destructive but uses the shared stack: give its "
                "module a module-scoped `stack` fixture that returns own_stack")


# ------------------------------------------------------------ time limit

class TestTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise TestTimeout(f"test exceeded its time limit ({signal.getitimer(signal.ITIMER_REAL)})")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Interrupts a test body that runs past its limit (SIGALRM; every
    blocking call in the suite also has its own timeout)."""
    m = item.get_closest_marker("timeout")
    limit = int(m.args[0]) if m else TEST_TIMEOUT_S
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        _state["failures"] += 1
        # a module's own stack (tasks, UI) is not one of ours: its tails now
        for s in stk.Stack.live - set(_state["stacks"]):
            _state["tails"].append(f"===== the stack {s.root} of {item.nodeid}\n" + s.log_tails())
        for d in sorted(d for d in stk.Stack.log_dirs if os.path.isdir(d)):
            _state["tails"].append(f"===== the logs in {d} at the failure of {item.nodeid}\n"
                                   + stk.log_tails(d, only=".log"))
    if call.when == "call":
        # a stack that stopped answering must not cost a minute per test
        if call.excinfo is not None and call.excinfo.errisinstance((TestTimeout, stk.requests.Timeout)):
            _state["timeouts"] += 1
        else:
            _state["timeouts"] = 0
        if _state["timeouts"] >= 3:
            item.session.shouldstop = "3 tests in a row ran out of time: the stack is stuck"
        if time.monotonic() - _state["t0"] > SESSION_BUDGET_S:
            item.session.shouldstop = f"the suite ran past its {SESSION_BUDGET_S} s budget"


# ------------------------------------------------------------ the stacks

def _stack_up(**kw):
    """Starts a stack (stack.Stack(**kw), 120 s at most); returns it, or
    fails the test that asked for it with the daemons' log tails kept for
    the summary."""
    s, problem = None, None
    failures = _state["failures"]
    try:
        s = stk.Stack(**kw)
        _state["stacks"].append(s)
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, 120)  # the whole start-up
        try:
            s.start()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except (stk.StackError, stk.ApiError, TestTimeout, OSError,
            stk.requests.RequestException) as e:
        problem = f"could not start the Kowloon stack: {e}"
        if s is not None:
            _state["failures"] += 1
            _stack_down(s, failures)
    if problem:
        pytest.fail(problem, pytrace=False)
    return s, failures


def _stack_down(s, failures):
    """Stops s; keeps its log tails and files when a test failed while it
    ran (or KOWLOON_TEST_KEEP is set), else removes its directory."""
    s.close()
    if s in _state["stacks"]:
        _state["stacks"].remove(s)
    failed = _state["failures"] > failures
    if failed:
        _state["tails"].append(s.log_tails())
    if failed or os.environ.get("KOWLOON_TEST_KEEP"):
        _state["roots"].append(s.root)
    else:
        s.remove()


@pytest.fixture(scope="session")
def stack():
    """The stack the tests of this process share (one per xdist worker)."""
    s, failures = _stack_up()
    yield s
    _stack_down(s, failures)


@pytest.fixture(scope="module")
def own_stack(request):
    """A stack for one module alone, for tests that break daemons on
    purpose; such a module overrides `stack` with it:

        pytestmark = pytest.mark.destructive

        @pytest.fixture(scope="module")
        def stack(own_stack):
            return own_stack

    The module's STACK_GATEWAY_ENV (a dict, optional) goes to every gateway
    of that stack: a period its tests wait out, made short."""
    s, failures = _stack_up(gateway_env=getattr(request.module, "STACK_GATEWAY_ENV", None))
    yield s
    _stack_down(s, failures)


@pytest.fixture(autouse=True)
def _idle_between_tests(request):
    """Leaves the cluster idle after each test: leftover jobs cancelled."""
    yield
    if "stack" in request.fixturenames:
        s = request.getfixturevalue("stack")
        if not s.wait_idle():
            print("warning: cluster not idle after", request.node.nodeid, file=sys.stderr)


@pytest.fixture
def A(stack):
    return stack.client("A")


@pytest.fixture
def B(stack):
    return stack.client("B")


@pytest.fixture
def admin(stack):
    return stack.client("admin")


@pytest.fixture
def anon(stack):
    return stack.client()


@pytest.fixture
def tenant(stack, request):
    """A fresh tenant named after the test's module, so that what a test
    counts or sums is its own jobs alone: (name, client)."""
    return stack.new_tenant(request.module.__name__.removeprefix("test_"))


# ------------------------------------------------------------ the summary

def pytest_sessionfinish(session, exitstatus):
    """On an xdist worker: hands the log tails and kept directories to the
    controller, which prints them (pytest_testnodedown)."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["kowloon_tails"] = list(_state["tails"])
        out["kowloon_roots"] = list(_state["roots"])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    out = getattr(node, "workeroutput", None) or {}
    _state["tails"].extend(out.get("kowloon_tails", ()))
    _state["roots"].extend(out.get("kowloon_roots", ()))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _state["tails"]:
        terminalreporter.section("kowloon daemon logs")
        for t in _state["tails"]:
            terminalreporter.write_line(t)
    for root in _state["roots"]:
        terminalreporter.write_line(f"kowloon test stack files kept in {root}")
