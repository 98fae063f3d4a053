"""Slack file downloads, fenced because the request carries the bot token (Guarded files).

Only from ``SLACK_FILE_ORIGINS``, never through a redirect, at most 100 MiB and
never more than the declared size, and never Slack's HTML sign-in page. Bytes
stream to a temporary file that is renamed into place only when every check
passed; any failure, cancellation included, removes it. The adapter's
``fetch_file`` is the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import unicodedata
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path, PurePath
from typing import BinaryIO

import aiofiles
import aiofiles.os
import aiohttp
from yarl import URL

from channel.contract import Fetched, FileMeta
from channel.errors import ChannelError

from .errors import map_slack_error
from .file_meta import MAX_BYTES, mib

log = logging.getLogger(__name__)

#: aiohttp's classic chunk size; the benchmark's plain download uses it.
CHUNK_BYTES = 64 * 1024
#: Largest single read of a download body (also the socket buffer it fills).
READ_BYTES = 2**20
#: Largest batch of a download hashed and written in one worker-thread call.
BUFFER_BYTES = 4 * 2**20
#: Per-read and connect bounds; no total, since 100 MiB on a slow link may take minutes.
_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_UNSAFE_NAME = re.compile(r"[/\\:*?\"<>|]")
_MAX_STEM = 120
_MAX_SUFFIX = 16

__all__ = ["BUFFER_BYTES", "CHUNK_BYTES", "MAX_BYTES", "READ_BYTES", "download", "http_session", "safe_name"]


def http_session() -> aiohttp.ClientSession:
    """The session downloads share (one per adapter). Cookies are dropped so nothing a file host
    sets travels to the next download."""
    return aiohttp.ClientSession(timeout=_TIMEOUT, cookie_jar=aiohttp.DummyCookieJar())


async def download(
    meta: FileMeta,
    dest_dir: Path,
    *,
    variant: str | None,
    token: str,
    origins: Sequence[str],
    session: aiohttp.ClientSession | None = None,
) -> Fetched:
    """Fetch ``meta`` into ``dest_dir/files/`` under a safe, unique name; see the module docstring.

    ``session`` is the adapter's shared one; without it a session lives for this call only.
    """
    url, media_type, name = _source(meta, variant)
    _check_origin(url, origins)
    if meta.size > MAX_BYTES:
        raise _refused(f"the file is {mib(meta.size)}; files over {mib(MAX_BYTES)} are not fetched.")
    # The declared size bounds the body; a low rendition is smaller than the original it derives from.
    limit = meta.size
    files_dir = dest_dir / "files"
    part = files_dir / f".part-{uuid.uuid4().hex}"
    own_session = session is None
    http = session if session is not None else http_session()
    try:
        async with _download_errors():
            await aiofiles.os.makedirs(files_dir, exist_ok=True)
            size, sha256 = await _stream(http, url, token, part, media_type=media_type, limit=limit)
            if variant != "video_low" and size != meta.size:
                raise ChannelError("slack_error", f"the download ended early ({size} of {meta.size} bytes).")
            path = await _place(part, files_dir, name)
    except BaseException:
        # Cancellation too: a partial file must never stay behind (shielded from a second cancel).
        await asyncio.shield(_discard(part))
        raise
    finally:
        if own_session:
            await http.close()
    return Fetched(path=path, media_type=media_type, size=size, sha256=sha256)


@contextlib.asynccontextmanager
async def _download_errors() -> AsyncIterator[None]:
    """Network failures as ``slack_call`` maps them; disk failures named as such (no path in them)."""
    try:
        yield
    except ChannelError:
        raise
    except (aiohttp.ClientError, TimeoutError) as exc:  # before OSError: both can be OSErrors
        error = map_slack_error(exc, "file download")
        if error is None:  # pragma: no cover - these types always map
            raise
        raise error from exc
    except OSError as exc:
        # Our disk, not Slack: the model must not be told Slack failed.
        reason = exc.strerror or type(exc).__name__
        log.error("saving a download failed: %s", reason)
        raise ChannelError(
            "tool_failed", f"could not save the file in the task directory ({reason})."
        ) from exc


def _source(meta: FileMeta, variant: str | None) -> tuple[str, str, str]:
    """``(url, media type, local name)`` of the requested rendition."""
    if variant == "video_low":
        low = meta.data.get("mp4_low")
        if not isinstance(low, str) or not low:
            raise ChannelError("unsupported", "This file has no smaller rendition; fetch it without variant.")
        return low, "video/mp4", f"{PurePath(meta.name).stem or 'video'}-low.mp4"
    url = meta.data.get("url")
    if not isinstance(url, str) or not url:
        raise ChannelError("not_found", "Slack gave no download address for this file.")
    return url, meta.media_type, meta.name


def _origin_key(raw: str) -> tuple[str, str, int | None] | None:
    """``(scheme, host, port)`` with the default port filled in, or None if it is not an http(s) URL."""
    try:
        parsed = URL(raw)
    except (TypeError, ValueError):
        return None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return None
    return parsed.scheme, parsed.host.lower(), parsed.port


def _check_origin(url: str, origins: Sequence[str]) -> None:
    # Whole-origin comparison after parsing: "files.slack.com.evil.com" or "files.slack.com@evil.com"
    # parse to another host, so no prefix trick gets the token sent elsewhere.
    key = _origin_key(url)
    allowed = {k for k in (_origin_key(o.strip()) for o in origins) if k is not None}
    if key is None or "@" in url.split("//", 1)[-1].split("/", 1)[0] or key not in allowed:
        raise _refused("the file is not hosted on an allowed Slack file origin (SLACK_FILE_ORIGINS).")


async def _stream(
    http: aiohttp.ClientSession, url: str, token: str, part: Path, *, media_type: str, limit: int
) -> tuple[int, str]:
    """GET ``url`` into ``part``; ``(bytes written, sha256 hex)``.

    Reads of up to ``READ_BYTES`` gather into a batch of at most ``BUFFER_BYTES``, which one
    worker-thread call hashes and writes while the next batch is read. One batch at most is in
    flight, so at most two are held. A byte count past ``limit`` stops the download before the
    excess joins a batch, so nothing beyond the limit is ever written.
    """
    headers = {
        "Authorization": f"Bearer {token}",
        # Identity encoding: sizes and the hash are then the file's own bytes.
        "Accept-Encoding": "identity",
    }
    # Never follow a redirect: the Authorization header would go along to wherever it points.
    # Its own timeout: the shared session's total bound is sized for API calls, not 100 MiB.
    async with http.get(
        url, headers=headers, allow_redirects=False, read_bufsize=READ_BYTES, timeout=_TIMEOUT
    ) as response:
        _check_response(response, media_type=media_type, limit=limit)
        sink = await _Sink.create(part)
        try:
            size = 0
            batch: list[bytes] = []
            batched = 0
            async for chunk in response.content.iter_chunked(READ_BYTES):
                size += len(chunk)
                if size > limit:
                    raise _refused(f"the file host sent more than the declared {limit} bytes; stopped.")
                batch.append(chunk)
                batched += len(chunk)
                # A read is at most READ_BYTES, so the next one could not fit: hand this batch off.
                if batched > BUFFER_BYTES - READ_BYTES:
                    await sink.write(batch)
                    batch, batched = [], 0
            await sink.write(batch)
            return size, await sink.finish()
        finally:
            await sink.close()


class _Sink:
    """``part`` with its running SHA-256, fed a batch at a time by worker-thread calls.

    The file is a plain one, used only inside those calls, rather than aiofiles (the project's
    rule for file I/O): aiofiles would hop to a thread for each write and leave hashing on the
    event loop, while one call here hashes and writes a whole batch off the loop (hashlib and
    file writes both release the GIL, so this overlaps the network reads).
    """

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._digest = hashlib.sha256()
        self._in_flight: asyncio.Future[None] | None = None
        self._closing: asyncio.Task[None] | None = None

    @classmethod
    async def create(cls, part: Path) -> _Sink:
        # Exclusive create: a fresh random name, never someone else's file.
        return cls(await asyncio.to_thread(part.open, "xb"))

    async def write(self, batch: list[bytes]) -> None:
        """Wait for the previous batch to be on disk, then start writing ``batch``."""
        await self._settle()
        if batch:
            self._in_flight = asyncio.ensure_future(asyncio.to_thread(self._put, batch))

    async def finish(self) -> str:
        """Wait for the last batch, close the file (its errors raised) and return the hex digest."""
        await self._settle()
        await self.close()
        return self._digest.hexdigest()

    async def close(self) -> None:
        """Close the file once the batch in flight is done: a thread cannot be stopped midway, and
        the caller removes the file next. Shielded, so a second cancellation cannot leave it open."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _settle(self) -> None:
        if self._in_flight is not None:
            # Shielded: cancelling the download must not detach the write from this sink.
            await asyncio.shield(self._in_flight)
            self._in_flight = None

    async def _close(self) -> None:
        if self._in_flight is not None:
            # After a failure or cancellation: wait it out; its own error, if any, gives way to that one.
            await asyncio.wait([self._in_flight])
            if not self._in_flight.cancelled():
                self._in_flight.exception()  # retrieved, so it is not reported as unhandled
        await asyncio.to_thread(self._file.close)

    def _put(self, batch: list[bytes]) -> None:
        """Worker thread: hash and write ``batch``. At most one runs at a time, in order."""
        for chunk in batch:
            self._digest.update(chunk)
            self._file.write(chunk)


def _check_response(response: aiohttp.ClientResponse, *, media_type: str, limit: int) -> None:
    status = response.status
    if 300 <= status < 400:
        raise _refused(
            "Slack answered with a redirect (usually to its sign-in page: the app may lack the files:read "
            "scope or access to this file); it was not followed."
        )
    if status == 404:
        raise ChannelError("not_found", "That file no longer exists or is not visible to the bot.")
    if status != 200:
        raise ChannelError("slack_error", f"the file host answered HTTP {status}.")
    if response.content_type in _HTML_TYPES and media_type.lower() not in _HTML_TYPES:
        raise _refused(
            "Slack returned its HTML sign-in page instead of the file: the app may lack the files:read "
            "scope or access to this file."
        )
    if response.content_length is not None and response.content_length > limit:
        raise _refused(f"the file host announced {response.content_length} bytes, over the declared {limit}.")


def safe_name(name: str) -> str:
    """``name`` as one harmless path component: no separators, control characters or leading dots;
    the extension kept; bounded length."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(c for c in base if unicodedata.category(c)[0] != "C")
    base = _UNSAFE_NAME.sub("_", base).strip().lstrip(".").strip()
    path = PurePath(base or "file")
    suffix = path.suffix if len(path.suffix) <= _MAX_SUFFIX else ""
    stem = (path.stem if suffix else path.name)[:_MAX_STEM] or "file"
    return stem + suffix


async def _place(part: Path, files_dir: Path, name: str) -> Path:
    """Move ``part`` to a fresh name in ``files_dir``, never replacing an existing file."""
    clean = PurePath(safe_name(name))
    for n in range(1000):
        candidate = files_dir / (clean.name if n == 0 else f"{clean.stem}-{n}{clean.suffix}")
        try:
            await _claim(part, candidate)
        except FileExistsError:
            continue
        return candidate
    raise ChannelError("tool_failed", "too many files with that name in your task directory.")


async def _claim(part: Path, candidate: Path) -> None:
    """Give ``part`` the name ``candidate`` atomically; FileExistsError if the name is taken, even
    by a concurrent fetch of the same file."""
    claim = asyncio.ensure_future(_claim_steps(part, candidate))
    try:
        await asyncio.shield(claim)
    except asyncio.CancelledError:
        # Its steps run in threads and may still succeed: wait them out, then give the name up,
        # so a cancelled fetch leaves no file behind (shielded from a second cancel).
        await asyncio.shield(_unclaim(claim, candidate))
        raise


async def _claim_steps(part: Path, candidate: Path) -> None:
    try:
        # A hard link never replaces a file, and unlike a rename over a reserved name it does not
        # make ext4 start flushing the whole file at once (auto_da_alloc): 5-20 ms per 100 MiB.
        await aiofiles.os.link(part, candidate)
    except FileExistsError:
        raise
    except OSError:
        # No hard links on this file system: reserve the name with an exclusive create, then
        # rename over our own empty reservation.
        async with aiofiles.open(candidate, "xb"):
            pass
        last_step = aiofiles.os.replace(part, candidate)
    else:
        last_step = aiofiles.os.remove(part)
    try:
        await last_step
    except BaseException:
        await _discard(candidate)
        raise


async def _unclaim(claim: asyncio.Future[None], candidate: Path) -> None:
    await asyncio.wait([claim])
    if not claim.cancelled() and claim.exception() is None:
        await _discard(candidate)


async def _discard(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        await aiofiles.os.remove(path)


def _refused(reason: str) -> ChannelError:
    return ChannelError("file_refused", f"Download refused: {reason}")
