"""The file host: ``url_private`` downloads, Slack's sign-in page, and upload targets.

Files are served only to ``Authorization: Bearer <token>`` with ``files:read``;
anyone else gets the HTML sign-in page with status 200, as Slack does. A file's
``mode`` scripts the other answers a downloader must survive (a redirect to the
sign-in page, more bytes than declared). Every request is recorded in ``requests``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from aiohttp import web

from .records import CHUNK_SIZE, File, pattern_block
from .workspace import Workspace

SIGNIN_HTML = (
    b'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Slack</title></head>'
    b'<body><h1>Sign in to your workspace</h1><form action="/signin" method="post">'
    b'<input name="domain"></form></body></html>'
)
LONG_EXTRA_BYTES = 64 * 1024


@dataclass
class FileRequest:
    """One request to the file host (``/files/...`` or the sign-in page)."""

    method: str
    path: str
    #: ``Host`` header: ``127.0.0.1:PORT`` for ``files_origin``, ``localhost:PORT`` for ``other_origin``.
    host: str
    file_id: str | None
    #: ``"file"``, ``"download"``, ``"mp4_low"`` or ``"signin"``.
    variant: str
    #: An ``Authorization`` header was sent (right or wrong).
    sent_authorization: bool
    #: The header was exactly ``Bearer <token>``.
    authorized: bool
    status: int
    #: What was served: ``"file"``, ``"signin"``, ``"redirect"``, ``"long"``, ``"not_found"``.
    served: str


class FileHost:
    """Serves a workspace's files; see the module docstring."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.requests: list[FileRequest] = []

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/files/{fid}/download/{name}", self._file_download)
        router.add_get("/files/{fid}/mp4_low/{name}", self._file_mp4_low)
        router.add_get("/files/{fid}/{name}", self._file_plain)
        router.add_get("/signin", self._signin)
        router.add_post("/upload/v1/{fid}", self._upload)

    async def _upload(self, request: web.Request) -> web.Response:
        upload = self.workspace.uploads.get(request.match_info["fid"])
        if upload is None:
            await request.read()
            return web.Response(status=404, text="upload not found", content_type="text/plain")
        if request.content_type == "multipart/form-data":
            form = await request.post()
            data = b""
            for value in form.values():
                if isinstance(value, web.FileField):
                    data = value.file.read()
                    break
        else:
            buffer = bytearray()
            async for chunk in request.content.iter_chunked(CHUNK_SIZE):
                buffer += chunk
            data = bytes(buffer)
        upload.data = data
        return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

    def _record(
        self,
        request: web.Request,
        file_id: str | None,
        variant: str,
        status: int,
        served: str,
    ) -> None:
        header = request.headers.get("Authorization")
        self.requests.append(
            FileRequest(
                method=request.method,
                path=request.path_qs,
                host=request.host,
                file_id=file_id,
                variant=variant,
                sent_authorization=header is not None,
                authorized=header == f"Bearer {self.workspace.token}",
                status=status,
                served=served,
            )
        )

    @staticmethod
    def _signin_page() -> web.Response:
        return web.Response(body=SIGNIN_HTML, content_type="text/html", charset="utf-8")

    async def _signin(self, request: web.Request) -> web.Response:
        self._record(request, None, "signin", 200, "signin")
        return self._signin_page()

    async def _file_plain(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_file(request, "file")

    async def _file_download(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_file(request, "download")

    async def _file_mp4_low(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_file(request, "mp4_low")

    async def _serve_file(self, request: web.Request, variant: str) -> web.StreamResponse:
        ws = self.workspace
        fid = request.match_info["fid"]
        f = ws.files.get(fid)
        if f is None or (variant == "mp4_low" and f.mp4_low is None):
            self._record(request, fid, variant, 404, "not_found")
            return web.Response(status=404, text="Not Found")
        authorized = request.headers.get("Authorization") == f"Bearer {ws.token}"
        if not authorized or "files:read" not in ws.scopes or f.mode == "html_signin":
            self._record(request, fid, variant, 200, "signin")
            return self._signin_page()
        if f.mode == "redirect":
            self._record(request, fid, variant, 302, "redirect")
            location = f"{ws.other_origin}/signin?redir=/files/{fid}/{f.name}"
            return web.Response(status=302, headers={"Location": location})
        if variant == "mp4_low":
            assert f.mp4_low is not None
            self._record(request, fid, variant, 200, "file")
            return web.Response(body=f.mp4_low, content_type="video/mp4")
        if f.mode == "long":
            self._record(request, fid, variant, 200, "long")
            return await self._stream(request, f.mimetype, None, _long_chunks(f))
        self._record(request, fid, variant, 200, "file")
        return await self._stream(request, f.mimetype, f.size, f.chunks())

    @staticmethod
    async def _stream(
        request: web.Request, mimetype: str, size: int | None, chunks: Iterable[bytes]
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.content_type = mimetype
        if size is not None:
            response.content_length = size
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        if request.method != "HEAD":
            for chunk in chunks:
                await response.write(chunk)
        await response.write_eof()
        return response


def _long_chunks(f: File) -> Iterator[bytes]:
    """The file's bytes, then filler: more than both its real and its declared size."""
    yield from f.chunks()
    declared = f.declared_size if f.declared_size is not None else f.size
    extra = max(declared - f.size, 0) + LONG_EXTRA_BYTES
    block = pattern_block(f"{f.id}:long")
    while extra > 0:
        piece = block[: min(extra, len(block))]
        extra -= len(piece)
        yield piece
