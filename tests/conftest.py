"""Shared fixtures.

Store fixtures: every contract test runs once per backend. ``sqlite`` uses a file
under ``tmp_path``; ``sqlite-inline`` the same with every job run on the loop's thread when the
database thread is idle (``Store.inline_when``, as while one run works); ``postgres`` needs
``TEST_DATABASE_URL`` (e.g. ``postgresql://postgres@127.0.0.1:5432/test``) and gets a fresh
schema per test, dropped afterwards, so tests never see each other's rows.

A test that starts a Python process (a server, the CLI, an MCP server) must be marked
``@pytest.mark.process`` (``-m "not process and not browser"`` is the fast subset); an unmarked one
fails at teardown, naming the marker.
"""

from __future__ import annotations

# The provider wire tests (test_provider_wire.py) mock the model SDKs with respx, which patches
# `httpx`/`httpcore`; the openai and anthropic SDKs (and pydantic-ai) use `httpx2`/`httpcore2`.
# Aliasing makes both names one library. It must run before anything imports httpx, and pydantic-ai
# imports it when installed, so it runs here, first (respx's own pytest plugin, which would import
# httpx even earlier, is off: `-p no:respx` in pyproject.toml). Nothing else here imports legacy
# httpx (fastmcp 4 and the MCP SDK use httpx2 too), so the alias changes nothing for other tests.
import httpx2

httpx2.alias_httpx()

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import AsyncIterator, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Protocol  # noqa: E402

# Subprocesses the tests start (`python -m tests.support.mcp_tickets`, the app under test) import
# test support from the repository, which is not an installed package: put its root on their path.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p)
import pytest  # noqa: E402

from storage import Store, open_store  # noqa: E402
from tests.support.postgres import drop_schema, fresh_schema, new_schema  # noqa: E402
from tests.support.process import ServerProcess  # noqa: E402
from threadbound_emulator import FakeSlack  # noqa: E402


class StoreFactory(Protocol):
    """Opens another store on the test's database (same file or schema), closed at teardown."""

    #: The database URL the stores open (for a subprocess that must reach the same database).
    url: str

    async def __call__(self, *, migrate: bool = True) -> Store: ...


@pytest.fixture
async def database_url() -> AsyncIterator[str]:
    """The URL of a fresh schema on TEST_DATABASE_URL's Postgres, for several app instances to share;
    dropped at teardown. Skips the test when TEST_DATABASE_URL is not set."""
    reason = "TEST_DATABASE_URL not set: multi-instance Postgres tests skipped"
    async with fresh_schema(reason=reason) as schema:
        yield schema.url


@pytest.fixture(params=["sqlite", "sqlite-inline", "postgres"])
async def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    base_url = ""
    schema = ""
    if request.param.startswith("sqlite"):
        url = f"sqlite:///{tmp_path}/store.db"
    else:
        base_url = os.environ.get("TEST_DATABASE_URL", "")
        if not base_url:
            pytest.skip("TEST_DATABASE_URL not set: Postgres store tests skipped")
        _, schema, url = new_schema(base_url)

    opened: list[Store] = []

    async def make(*, migrate: bool = True) -> Store:
        store = open_store(url)
        if request.param == "sqlite-inline":
            # As when the process has nothing else to do: jobs run on the loop's thread when they can.
            store.inline_when(lambda: True)
        opened.append(store)
        if migrate:
            await store.migrate()
        return store

    make.url = url  # type: ignore[attr-defined]
    try:
        yield make  # type: ignore[misc]
    finally:
        for store in opened:
            await store.close()
        if schema:
            await drop_schema(base_url, schema)


@pytest.fixture
async def store(store_factory: StoreFactory) -> Store:
    """A migrated store on a fresh database, closed at teardown."""
    return await store_factory()


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    """An emulated workspace with #general (C1) and Alice (U1), Bob (U2) and Olga (U9) in it.
    A test module may define its own ``slack`` for another workspace."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_user("U2", "bob", display_name="Bob")
        slack.add_user("U9", "olga", display_name="Olga")
        yield slack


#: Every Python process the tests started (argv), in order; see ``_process_tests_are_marked``.
_STARTED: list[str] = []
_popen_init = subprocess.Popen.__init__


def _recording_init(self: subprocess.Popen[bytes], args: object, *rest: object, **kwargs: object) -> None:
    argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)  # type: ignore[call-overload]
    if argv and os.fspath(argv[0]) == sys.executable:
        _STARTED.append(" ".join(map(str, argv)))
    _popen_init(self, args, *rest, **kwargs)  # type: ignore[arg-type]


subprocess.Popen.__init__ = _recording_init  # type: ignore[assignment,method-assign]


# Served apps are forked from a process that imported the app already (tests/support/preloaded.py).
ServerProcess.preloaded = os.environ.get("THREADBOUND_TEST_SPAWN", "") not in ("1", "true")


@pytest.fixture(autouse=True)
def _process_tests_are_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test (or its fixtures) that starts a Python process carries the ``process`` marker."""
    before, forked = len(_STARTED), len(ServerProcess.started)
    yield
    started = [*_STARTED[before:], *ServerProcess.started[forked:]]
    if started and request.node.get_closest_marker("process") is None:
        pytest.fail(f"this test starts a process ({started[0]}): mark it @pytest.mark.process")
