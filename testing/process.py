"""``python -m app serve`` as a real subprocess, for crash, restart and signal tests."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp

from .harness import SIGNING_SECRET, free_port


class ServerProcess:
    def __init__(self, env: dict[str, str], *, cwd: Path, log_path: Path) -> None:
        self.port = free_port()
        self.env = {**os.environ, **env, "PORT": str(self.port), "HOST": "127.0.0.1"}
        self.env.setdefault("SLACK_SIGNING_SECRET", SIGNING_SECRET)
        self.cwd = cwd
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, within: float = 30.0) -> ServerProcess:
        log = self.log_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app", "serve", cwd=self.cwd, env=self.env, stdout=log, stderr=log
        )
        log.close()
        deadline = asyncio.get_running_loop().time() + within
        async with aiohttp.ClientSession() as http:
            while True:
                if self.proc.returncode is not None:
                    raise RuntimeError(
                        f"server exited with {self.proc.returncode}: {self.log_path.read_text()}"
                    )
                try:
                    async with http.get(f"{self.url}/healthz") as response:
                        if response.status == 200:
                            return self
                except aiohttp.ClientError:
                    pass
                if asyncio.get_running_loop().time() > deadline:
                    raise TimeoutError(f"server did not start: {self.log_path.read_text()}")
                await asyncio.sleep(0.1)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    async def wait(self, within: float = 30.0) -> int:
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), within)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.terminate()
            try:
                await self.wait(15)
            except TimeoutError:
                self.kill()
                await self.proc.wait()
