"""``files.*``: file info, and the two-step external upload (URL, bytes to the file host, complete).

Completing an upload posts one bot message per target channel carrying the files,
threaded in the first channel when ``thread_ts`` is given, and records the shares.
"""

from __future__ import annotations

import mimetypes
import time

from ..records import File, Upload
from ..wire import JSON, Params, SlackError, as_int, as_json, as_list
from ..workspace import Workspace
from .method import Method


def info(ws: Workspace, params: Params) -> JSON:
    fid = str(params.get("file") or "")
    if fid in ws.canvases:
        obj = ws.canvas_object(ws.canvases[fid])
    elif fid in ws.files:
        obj = ws.hosted_file_object(ws.files[fid])
    else:
        raise SlackError("file_not_found")
    return {"file": obj, "comments": [], "response_metadata": {"next_cursor": ""}}


def get_upload_url(ws: Workspace, params: Params) -> JSON:
    filename = str(params.get("filename") or "")
    length = as_int(params.get("length"), -1)
    if not filename or length < 0:
        raise SlackError("invalid_arguments")
    fid = ws.new_id("FUP")
    ws.uploads[fid] = Upload(fid, filename, length, params.get("alt_txt"))
    return {"upload_url": f"{ws.files_origin}/upload/v1/{fid}", "file_id": fid}


def complete_upload(ws: Workspace, params: Params) -> JSON:
    entries = as_json(params.get("files") or "", "invalid_arguments")
    if not isinstance(entries, list) or not entries:
        raise SlackError("invalid_arguments")
    channels = as_list(params.get("channels"))
    if params.get("channel_id"):
        channels.insert(0, str(params["channel_id"]))
    targets = [ws.channel({"channel": c}) for c in channels]
    root_ts = ws.thread_root(targets[0].id, params.get("thread_ts")) if targets else None
    uploads: list[tuple[Upload, str]] = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise SlackError("invalid_arguments")
        upload = ws.uploads.get(str(entry.get("id")))
        if upload is None or upload.data is None:
            raise SlackError("file_not_found")
        uploads.append((upload, str(entry.get("title") or upload.filename)))
    created: list[File] = []
    for upload, title in uploads:
        del ws.uploads[upload.file_id]
        mimetype = mimetypes.guess_type(upload.filename)[0] or "application/octet-stream"
        data = upload.data or b""
        f = File(
            upload.file_id,
            upload.filename,
            title,
            mimetype,
            data,
            len(data),
            user=ws.bot_user_id,
            created=int(time.time()),
        )
        ws.files[f.id] = f
        created.append(f)
    for chan in targets:
        message = ws.bot_message(str(params.get("initial_comment") or ""), ws.next_ts())
        message["files"] = [ws.hosted_file_object(f) for f in created]
        message["upload"] = True
        thread = root_ts if chan is targets[0] else None
        if thread is not None:
            root = ws.find(chan.id, thread)
            assert root is not None
            ws.attach_reply(root, message)
        ws.insert(chan.id, message)
        share: JSON = {"ts": message["ts"], "channel_name": chan.name, "team_id": ws.team_id}
        if thread is not None:
            share["thread_ts"] = thread
        for f in created:
            bucket = f.shares.setdefault("private" if chan.is_private else "public", {})
            bucket.setdefault(chan.id, []).append(share)
    return {"files": [ws.hosted_file_object(f) for f in created]}


METHODS = {
    "files.info": Method(info, "files:read"),
    "files.getUploadURLExternal": Method(get_upload_url, "files:write"),
    "files.completeUploadExternal": Method(complete_upload, "files:write"),
}
