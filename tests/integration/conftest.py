"""Fixtures of the integration suite: one private stack (PostgreSQL, Redis,
gateway, nodes node-a and node-b) for the whole session, API clients for
tenants A and B and an admin, and a per-test time limit so that nothing
hangs. On failure the tails of every daemon log are printed at the end."""

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

_state = {"failed": False, "stack": None, "tails": None, "root": None,
          "timeouts": 0, "t0": time.monotonic()}


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout(seconds): per-test time limit")
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame):
    """The daemons live in their own sessions: stop them before dying."""
    s = _state["stack"]
    if s is not None:
        s.close()
    os._exit(143)


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
        _state["failed"] = True
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


# ------------------------------------------------------------ the stack

@pytest.fixture(scope="session")
def stack():
    s, problem = None, None
    try:
        s = stk.Stack()
        _state["stack"] = s
        _state["root"] = s.root
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
            _state["failed"] = True
            _state["tails"] = s.log_tails()
            s.close()
    if problem:
        pytest.fail(problem, pytrace=False)
    yield s
    s.close()
    if _state["failed"]:
        _state["tails"] = s.log_tails()
    if _state["failed"] or os.environ.get("KOWLOON_TEST_KEEP"):
        _state["root"] = s.root  # kept for reading
    else:
        s.remove()
        _state["root"] = None


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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _state["tails"]:
        terminalreporter.section("kowloon daemon logs")
        terminalreporter.write_line(_state["tails"])
    if _state["root"]:
        terminalreporter.write_line(f"kowloon test stack files kept in {_state['root']}")
