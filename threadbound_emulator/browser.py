"""The person behind a private link: what the emulator does when someone clicks a link the app sent
them (a per-person MCP server's "connect your account" link).

:func:`links_for` finds the links in the ephemeral notes one user was shown; :func:`open_link` opens
one as that person's browser would — following redirects, as a session signed in as them at every
site it visits (each request says who with the ``X-Emulated-User`` header, which a test's sign-in
page reads in place of a password) — and returns the last page's status and text.
"""

from __future__ import annotations

import re
from urllib.parse import urljoin

import aiohttp

from .workspace import Workspace

_URL = re.compile(r"https?://[^\s<>|]+")
#: Who the browser is signed in as, at every site it visits.
USER_HEADER = "X-Emulated-User"


def links_for(workspace: Workspace, user: str) -> list[str]:
    """Every link in the ephemeral notes ``user`` was shown, oldest first."""
    return [
        url for _, shown_to, _, text in workspace.ephemerals if shown_to == user for url in _URL.findall(text)
    ]


async def open_link(url: str, as_user: str, *, max_hops: int = 10) -> tuple[int, str]:
    """Open ``url`` as ``as_user``'s browser: follow up to ``max_hops`` redirects; the last page."""
    async with aiohttp.ClientSession() as http:
        for _ in range(max_hops):
            async with http.get(url, allow_redirects=False, headers={USER_HEADER: as_user}) as response:
                location = response.headers.get("Location")
                if response.status in (301, 302, 303, 307, 308) and location:
                    url = urljoin(url, location)
                    continue
                return response.status, await response.text()
    raise RuntimeError(f"more than {max_hops} redirects")


__all__ = ["USER_HEADER", "links_for", "open_link"]
