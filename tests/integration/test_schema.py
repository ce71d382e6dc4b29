"""sql/schema.sql is the schema the migrations produce: scripts/schema.py
applies sql/NNN_*.sql to a throwaway PostgreSQL with the gateway's own
`migrate` and compares pg_dump's schema with the committed file."""
import os
import subprocess
import sys

from stack import GATEWAY_BIN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the gateway under test (KOWLOON_TEST_ROOT: the sanitizer build's under make test-asan)
SCHEMA = [sys.executable, os.path.join(ROOT, "scripts", "schema.py"), "--gateway", GATEWAY_BIN]


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
