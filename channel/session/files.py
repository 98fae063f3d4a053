"""Files: fetching one into the task directory, attaching one from it, posting a document."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path

from .. import task_files
from ..contract import FileMeta
from ..errors import ChannelError
from ..file_quota import FileQuota
from ..markdown import strip_mass_mentions
from ..tools import AttachArgs, FetchFileArgs, PostDocumentArgs
from .state import Reading, Result, SessionState


class Files:
    """The task's files: fetched into its directory, attached from it, and documents posted."""

    def __init__(
        self,
        state: SessionState,
        reading: Reading,
        *,
        task_dir: Path,
        max_bytes: int,
        quota: FileQuota | None = None,
    ) -> None:
        """``max_bytes`` bounds the task's files on disk (``TASK_FILES_MAX_BYTES``); ``quota`` is
        the host's, shared by its sessions (per person and install caps), else one of its own."""
        self._state = state
        self._reading = reading
        self.task_dir = task_dir
        self.max_bytes = max_bytes
        self.quota = quota or FileQuota()
        # One fetch of a file at a time: a parallel second fetch of it waits and gets the copy.
        self._fetching: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # A session is the task's activity: its files are kept FILES_TTL_DAYS from now (one utime).
        task_files.mark_used(task_dir)

    async def fetch_file(self, args: FetchFileArgs) -> Result:
        """``channel_fetch_file``: the file in the task directory (the copy already there, if any)."""
        record = await self._state.handles.resolve(args.file, "file")
        key = f"{record.ref}|{args.variant or ''}"
        async with self._fetching[key]:
            earlier = await asyncio.to_thread(task_files.remembered, self.task_dir, key)
            if earlier is not None:
                # The same file fetched before: the copy on disk is the answer (no download, no new copy).
                return {k: earlier[k] for k in ("path", "media_type", "size", "sha256")}
            data = json.loads(record.data or "{}")
            meta = FileMeta(
                ref=record.ref,
                name=str(data.get("name") or "file"),
                media_type=str(data.get("media_type") or "application/octet-stream"),
                size=int(data.get("size") or 0),
                data={k: v for k, v in data.items() if k not in ("name", "media_type", "size")},
            )
            if not meta.data.get("url"):
                meta = await self._state.adapter.file_info(record.ref)
            return await self._download(meta, key, args.variant)

    async def _download(self, meta: FileMeta, key: str, variant: str | None) -> Result:
        """Reserve the declared size (a download never writes past it), download, record who asked."""
        person = self._state.requester
        async with self.quota.reserve(
            self.task_dir, meta.size, task_max=self.max_bytes, person=person, what=f"{meta.name!r}"
        ):
            fetched = await self._state.adapter.fetch_file(meta, self.task_dir, variant=variant)
            result: Result = {
                "path": str(fetched.path.relative_to(self.task_dir)),
                "media_type": fetched.media_type,
                "size": fetched.size,
                "sha256": fetched.sha256,
            }
            entry = {**result, "by": person} if person else result
            await asyncio.to_thread(task_files.remember, self.task_dir, key, entry)
        return result

    def _task_path(self, raw: str) -> Path:
        root = self.task_dir.resolve()
        candidate = Path(raw)
        path = (candidate if candidate.is_absolute() else root / candidate).resolve()
        if not path.is_relative_to(root):
            raise ChannelError("file_refused", "path must name a file inside your task directory.")
        if not path.is_file():
            raise ChannelError("not_found", f"no file at {raw!r} in your task directory.")
        return path

    async def attach(self, args: AttachArgs) -> Result:
        path = self._task_path(args.path)
        comment = strip_mass_mentions(args.comment) if args.comment else None

        async def act() -> Result:
            uploaded = await self._state.adapter.attach(
                self._state.origin, path, title=args.title, comment=comment
            )
            row = await self._reading.file_row(uploaded.file, authored=True)
            result: Result = {"file": row["file"]}
            if uploaded.message_ref:
                result["message"] = await self._state.handles.mint("msg", uploaded.message_ref, authored=True)
            return result

        return await self._state.journal.write(
            "channel_attach", {"path": str(path.relative_to(self.task_dir.resolve()))}, act
        )

    async def post_document(self, args: PostDocumentArgs) -> Result:
        markdown = strip_mass_mentions(args.markdown)

        async def act() -> Result:
            doc = await self._state.adapter.post_document(self._state.origin, args.title, markdown)
            handle = await self._state.handles.mint("file", doc.ref, authored=True)
            return {"document": handle, "permalink": doc.permalink}

        return await self._state.journal.write("channel_post_document", {"title": args.title}, act)
