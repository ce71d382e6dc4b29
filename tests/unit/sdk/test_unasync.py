"""sdk/python/tools/unasync.py: the synchronous client is written from the
asyncio one, and the committed client.py is what it writes."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("unasync", ROOT / "sdk/python/tools/unasync.py")
unasync = importlib.util.module_from_spec(spec)
spec.loader.exec_module(unasync)

PRELUDE = '"""doc"""\nimport asyncio\n\nlog = logging.getLogger("kowloon")\n'


def body(src: str) -> str:
    return unasync.unasync(PRELUDE + src).split('log = logging.getLogger("kowloon")\n', 1)[1]


def test_committed_client_is_what_aio_makes():
    src = ROOT / "sdk/python/src/kowloon"
    assert (src / "client.py").read_text() == unasync.unasync((src / "aio.py").read_text()), \
        "client.py is stale: run make sdk-sync"


def test_keywords_and_names_are_made_synchronous():
    got = body("class AsyncJob:\n"
               "    async def f(self) -> AsyncIterator[str]:\n"
               "        async with self._http.stream() as r:\n"
               "            async for t in r.aiter_text():\n"
               "                await asyncio.sleep(1)\n"
               "        await r.aread()\n")
    assert got == ("class Job:\n"
                   "    def f(self) -> Iterator[str]:\n"
                   "        with self._http.stream() as r:\n"
                   "            for t in r.iter_text():\n"
                   "                time.sleep(1)\n"
                   "        r.read()\n")


def test_parentheses_of_an_await_go_and_continuations_follow_their_bracket():
    got = body("        body = (await self._send(\"POST\", \"/v1/blobs\", content=raw,\n"
               "                                 headers={\"a\": 1})).json()\n"
               "        resp = await self._send(\"POST\", \"/v1/jobs\", json=body,\n"
               "                                headers=h)\n"
               "    x = f(a,\n"
               "          b)\n")
    assert got == ("        body = self._send(\"POST\", \"/v1/blobs\", content=raw,\n"
                   "                          headers={\"a\": 1}).json()\n"
                   "        resp = self._send(\"POST\", \"/v1/jobs\", json=body,\n"
                   "                          headers=h)\n"
                   "    x = f(a,\n"
                   "          b)\n")


def test_whole_words_only_and_strings_left_alone():
    got = body('    """(await-free text: AsyncClientX stays)"""\n'
               '    y = my_aread + "AsyncJob ("\n'
               '    z = g(1,\n'
               '          2)\n')
    assert "AsyncClientX" in got and "my_aread" in got
    assert '"Job ("' in got          # a rename applies in strings too: names in messages follow
    assert got.endswith("    z = g(1,\n          2)\n")
