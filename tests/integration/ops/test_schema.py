"""sql/schema.sql is the schema the migrations produce: scripts/schema.py
applies sql/NNN_*.sql (then sql/objects.sql) to a throwaway PostgreSQL with
the gateway's own `migrate` and compares pg_dump's schema with the committed
file. A database upgraded from halfway ends the same."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

from stack import GATEWAY_BIN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# the gateway under test (KOWLOON_TEST_ROOT: the sanitizer build's under make test-asan)
SCHEMA = [sys.executable, os.path.join(ROOT, "scripts", "schema.py"), "--gateway", GATEWAY_BIN]
# Each test starts one or two throwaway PostgreSQLs (initdb, start, the
# migrations, pg_dump): about 11 s each here, and a loaded CI took past the
# suite's 60 s for two (stop 31, waiting for pg_isready); the calls' own
# limit is 120 s each.
pytestmark = pytest.mark.timeout(300)


def test_committed_schema_is_what_the_migrations_produce():
    r = subprocess.run(SCHEMA + ["--check"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_a_schema_that_lags_behind_a_migration_is_refused(tmp_path):
    """The check compares the whole file: one line changed fails it."""
    with open(os.path.join(ROOT, "sql", "schema.sql")) as f:
        text = f.read()
    stale = tmp_path / "schema.sql"
    stale.write_text(text.replace("CREATE TABLE public.jobs (", "CREATE TABLE public.jobz (", 1))
    r = subprocess.run(SCHEMA + ["--check", "--schema", str(stale)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "public.jobz" in r.stdout and "make schema" in r.stdout


def test_a_database_upgraded_from_halfway_ends_with_the_same_schema(tmp_path):
    """Migrated through 013 (the job object not defined yet: it is in
    sql/objects.sql, which comes with the whole folder), then to the end:
    014 drops a function 013 left none of, objects.sql defines it, and the
    schema is the committed one, functions and all."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import schema
    half = tmp_path / "half"
    half.mkdir()
    for f in sorted(glob.glob(os.path.join(ROOT, "sql", "0*.sql"))):
        if os.path.basename(f)[:3] <= "013":
            shutil.copy(f, half)
    assert os.path.exists(half / "013_webhooks.sql") and not os.path.exists(half / "014_events.sql")
    upgraded = schema.generate(GATEWAY_BIN, [str(half), os.path.join(ROOT, "sql")])
    with open(os.path.join(ROOT, "sql", "schema.sql")) as f:
        assert upgraded == f.read()
    # and every function of objects.sql is in the database: the unstripped
    # dump has each one's CREATE
    names = schema.objects_functions()
    assert {"kowloon_job_json", "kowloon_tenant_json", "kowloon_ts"} <= names
    saved = schema.objects_functions
    schema.objects_functions = lambda: set()
    try:
        full = schema.generate(GATEWAY_BIN, [str(half), os.path.join(ROOT, "sql")])
    finally:
        schema.objects_functions = saved
    for n in names:
        assert f"CREATE FUNCTION public.{n}(" in full, n
