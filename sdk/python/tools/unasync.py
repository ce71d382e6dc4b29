#!/usr/bin/env python3
"""Writes the synchronous client (src/kowloon/client.py) from the asyncio
one (src/kowloon/aio.py), so that each method, docstring and retry rule is
written once.

    python3 sdk/python/tools/unasync.py            rewrite client.py
    python3 sdk/python/tools/unasync.py --check    exit 1 if client.py is stale

aio.py is the source: everything from its `log = ...` line on is carried
over with `await`, `async def/with/for` dropped and the async names put
back to their synchronous ones (RENAMES); the header (docstring, imports)
is the synchronous client's own (HEADER). Parentheses that only held an
await, `(await x.f()).y`, are dropped too. What cannot be said this way is
kept out of aio.py's methods: _base's gather_async/join_text_async have the
synchronous twins gather/join_text.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "kowloon"

HEADER = '''"""The synchronous client: Client, Job and the job listing, on httpx.

Written by sdk/python/tools/unasync.py from aio.py: change aio.py, then run
it (`make sdk-sync`); a test fails while this file is stale."""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import httpx
import numpy as np

from . import _wire
from ._base import (Config, JobView, LabelFilter, LogCursor, RetryPolicy, build_submit,
                    build_task_submit, decode_output, gather, join_text, label_query,
                    new_idempotency_key, output_path, usage_query, wait_chunk)
from ._errors import (JobFailedError, KowloonError, NotFoundError, NotOfferedError,
                      TransportError, WaitTimeout, error_from_response)

'''

# async name -> synchronous name, as whole words
RENAMES = {
    "AsyncClient": "Client", "AsyncJobs": "Jobs", "AsyncJob": "Job",
    "AsyncIterator": "Iterator", "AsyncBaseTransport": "BaseTransport",
    "aread": "read", "aiter_text": "iter_text", "aiter_bytes": "iter_bytes",
    "aiter_sse_lines": "iter_sse_lines", "aclose": "close",
    "__aenter__": "__enter__", "__aexit__": "__exit__",
    "gather_async": "gather", "join_text_async": "join_text",
}


def unasync(text: str) -> str:
    start = text.index('\nlog = logging.getLogger("kowloon")')
    body = text[start + 1:]
    # (await f(...)).x -> f(...).x, where the parentheses hold only the call
    body = re.sub(r"\(await ([\w.]+\((?:[^()]|\([^()]*\))*\))\)", r"\1", body)
    body = re.sub(r"\basync (def|with|for)\b", r"\1", body)
    body = re.sub(r"\bawait ", "", body)
    body = re.sub(r"\basyncio\.sleep\b", "time.sleep", body)
    body = re.sub(r"\bAwaitable\[(\w+)\]", r"\1", body)
    body = re.sub(r"\b(" + "|".join(sorted(RENAMES, key=len, reverse=True)) + r")\b",
                  lambda m: RENAMES[m.group(1)], body)
    return HEADER + realign(text[start + 1:], body)


def _brackets(line: str, stack: list, in_doc: bool) -> bool:
    """Pushes the columns of the brackets `line` leaves open onto `stack`
    (popping those it closes); strings and docstrings are skipped. Returns
    whether the line ends inside a triple-quoted string."""
    i, quote = 0, None
    while i < len(line):
        c = line[i]
        if in_doc:
            if line.startswith('"""', i):
                in_doc, i = False, i + 3
                continue
        elif quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif line.startswith('"""', i):
            in_doc, i = True, i + 3
            continue
        elif c in "'\"":
            quote = c
        elif c == "#":
            break
        elif c in "([{":
            stack.append(i)
        elif c in ")]}" and stack:
            stack.pop()
        i += 1
    return in_doc


def realign(before: str, after: str) -> str:
    """Lines that continue a bracket were aligned to it in aio.py; where
    dropping `await`/`async` moved the bracket, they move with it."""
    old_stack: list = []
    new_stack: list = []
    old_doc = new_doc = False
    out = []
    for old, new in zip(before.split("\n"), after.split("\n")):
        indent = len(old) - len(old.lstrip(" "))
        if (old.strip() and not old_doc and old_stack and new_stack
                and indent == old_stack[-1] + 1):
            new = " " * (new_stack[-1] + 1) + new.lstrip(" ")
        old_doc = _brackets(old, old_stack, old_doc)
        new_doc = _brackets(new, new_stack, new_doc)
        out.append(new)
    return "\n".join(out)


def main() -> int:
    aio, client = SRC / "aio.py", SRC / "client.py"
    want = unasync(aio.read_text())
    if sys.argv[1:] == ["--check"]:
        if client.read_text() != want:
            print(f"{client} is stale: run python3 {__file__}", file=sys.stderr)
            return 1
        return 0
    if sys.argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    client.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
