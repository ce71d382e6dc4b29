"""The group commit of nodes' reports (api_runs.c): the succeeded runs that
several nodes report while a commit is in flight go to PostgreSQL in one
statement, each recorded for its own node with its own bytes, and a report
a node sends twice is recorded once."""

import contextlib
import re
import threading
import time

import pytest
import requests

from stack import wait_until

MERGED = re.compile(rb"results: the successes of (\d+) exchanges in one statement")


def slept(v):
    return {"slept": {"dtype": "float32", "shape": [1], "data": [float(v)]}}


def hold_job_results(stack, seconds):
    """A transaction that keeps job_results locked against inserts for
    seconds; returns once the lock is held (and the psql process)."""
    holder = stack.psql_background(
        f"BEGIN; LOCK TABLE job_results IN SHARE ROW EXCLUSIVE MODE; SELECT pg_sleep({seconds});"
        " COMMIT;")
    wait_until(lambda: stack.psql_value(
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
        " WHERE c.relname = 'job_results' AND l.mode = 'ShareRowExclusiveLock' AND l.granted")
        == "1", 10, 0.02, "the lock on job_results")
    return holder


def merged_counts(stack):
    with open(stack.procs["gateway"].log_path, "rb") as f:
        return [int(n) for n in MERGED.findall(f.read())]


def succeeded_reports(stack):
    r = requests.get(stack.cluster_base + "/metrics", timeout=10,
                     headers={"Authorization": f"Bearer {stack.cluster_token}"})
    m = re.search(r'^kowloon_job_results_total\{kernel="sleep",state="succeeded"\} (\S+)$', r.text,
                  re.M)
    return float(m[1]) if m else 0.0


@contextlib.contextmanager
def fake_nodes(stack, k):
    """k fake nodes (backend cuda: the stack's real nodes run cpu) whose runs
    last until the test ends them (run_s = 0)."""
    with contextlib.ExitStack() as nodes:
        yield [nodes.enter_context(stack.fake_node("fake-batch", run_s=3600)) for _ in range(k)]


def running_on(A, fakes, jobs):
    """Waits until each job runs on its own fake node; {node name: job id}."""
    where = {}

    def placed():
        for f in fakes:
            with f.mu:
                for run in f.taken:
                    if run["job_id"] in jobs:
                        where[f.name] = run["job_id"]
        return len(where) == len(fakes)
    wait_until(placed, 30, 0.05, "every fake node to hold a run")
    return where


@pytest.mark.timeout(90)
def test_the_successes_of_many_nodes_share_a_statement_each_with_its_own_bytes(A, stack):
    k = 6
    with fake_nodes(stack, k) as fakes:
        jobs = [A.submit("sleep", {"seconds": 0}, resources={"backend": "cuda", "gpus": 1})["id"]
                for _ in range(k)]
        where = running_on(A, fakes, set(jobs))
        before = merged_counts(stack)
        # the first commit waits on the lock; the other nodes' reports
        # arrive meanwhile and wait for the next statement together
        holder = hold_job_results(stack, 2)
        for i, f in enumerate(fakes):
            f.outputs = slept(100 + i)
            f.run_s = 0
        holder.wait(timeout=30)
        for j in jobs:
            done = A.wait(j, 30)
            assert done["state"] == "succeeded" and done["attempts"] == 1, done
        merged = merged_counts(stack)[len(before):]
        assert merged and max(merged) >= 2, \
            f"no statement held the reports of two nodes: {merged}"
        for i, f in enumerate(fakes):
            j = where[f.name]
            job = A.job(j)
            assert job["node"] == f.name, job
            assert A.outputs(j)["slept"]["data"] == [100.0 + i], f.name
            assert stack.psql_value(f"SELECT count(*) FROM job_events WHERE job_id = '{j}'"
                                    " AND state = 'succeeded'") == "1"


@pytest.mark.timeout(90)
def test_a_report_sent_twice_in_one_batch_is_recorded_once(A, stack):
    with fake_nodes(stack, 2) as (blocker, twice):
        jobs = [A.submit("sleep", {"seconds": 0}, resources={"backend": "cuda", "gpus": 1})["id"]
                for _ in range(2)]
        where = running_on(A, [blocker, twice], set(jobs))
        job = where[twice.name]
        # its run lasts an hour: the reports are the test's own
        count0 = succeeded_reports(stack)
        before = merged_counts(stack)
        holder = hold_job_results(stack, 2)
        blocker.run_s = 0    # its commit waits on the lock
        wait_until(lambda: stack.psql_value(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " WHERE c.relname = 'job_results' AND NOT l.granted") != "0", 10, 0.02,
            "the first commit to wait")
        rep = {"run_id": f"{job}.1", "job_id": job, "attempt": 1, "kernel": "sleep",
               "state": "succeeded", "backend": "cuda", "outputs": slept(7), "info": {}}
        answers = []

        def post():
            r = requests.post(f"{stack.cluster_base}/v1/cluster/nodes/{twice.id}/results",
                              headers={"Authorization": f"Bearer {twice.credential}"},
                              json={"free": 1, "results": [rep]}, timeout=30)
            answers.append((r.status_code, r.json()))
        posts = [threading.Thread(target=post) for _ in range(2)]
        for p in posts:
            p.start()
            time.sleep(0.1)
        for p in posts:
            p.join()
        holder.wait(timeout=30)
        # both exchanges are answered "recorded": the node may forget the run
        assert [a for a in answers if a != (200, {"recorded": [rep["run_id"]]})] == [], answers
        assert max(merged_counts(stack)[len(before):], default=0) >= 2, \
            "the two exchanges were not committed together"
        assert A.wait(job, 20)["state"] == "succeeded"
        assert A.outputs(job)["slept"]["data"] == [7.0]
        assert stack.psql_value(f"SELECT count(*) FROM job_events WHERE job_id = '{job}'"
                                " AND state = 'succeeded'") == "1"
        assert stack.psql_value(f"SELECT count(*) FROM job_results WHERE job_id = '{job}'") == "1"
        A.wait(where[blocker.name], 20)
        # the blocker's success and one of the two: counted once each
        wait_until(lambda: succeeded_reports(stack) >= count0 + 2, 10, 0.1, "the counts")
        assert succeeded_reports(stack) == count0 + 2
