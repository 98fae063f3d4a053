"""The container image without a container engine: the Dockerfile's shape is checked, and its install
and start steps are run for real in a clean virtual environment.

There is no Docker daemon where the suite runs, so nothing here builds or runs an image. What is
exercised: the build stage's RUN lines exactly as written (a fresh venv, ``pip install .`` of the
files the COPY lines name, the ``--version`` smoke check) with the final stage's ENV, the CMD in exec
form (no shell) on ``$PORT``, the HEALTHCHECK's own command against ``/healthz``, ``/readyz``, and
SIGTERM reaching the app, which exits 0 within ``SHUTDOWN_GRACE``. What is not: the base image, the
user switch, file ownership, ``COPY --from`` and the engine's own health and stop handling
(docs/deploy-containers.md says the same). Dependencies come from a wheelhouse built once per
dependency set from the package registry (``pip wheel``, kept under ``~/.cache``), so the install
step resolves offline and quickly after the first run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.support.harness import free_port
from threadbound_emulator import FakeSlack

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
TOKEN = "xoxb-container-test-0000"


@dataclass
class Stage:
    base: str
    name: str = ""
    steps: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.steps if kw == keyword]


def stages(text: str = "") -> list[Stage]:
    """The Dockerfile's stages, each with its instructions (continuation lines joined, comments gone)."""
    text = text or DOCKERFILE.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = " ".join(line[:-1] if line.endswith("\\") else line + "\n" for line in lines)
    found: list[Stage] = []
    for line in joined.splitlines():
        keyword, _, args = line.strip().partition(" ")
        keyword, args = keyword.upper(), " ".join(args.split())
        if keyword == "FROM":
            base, _, name = args.partition(" AS ")
            found.append(Stage(base, name))
        elif keyword and found:
            found[-1].steps.append((keyword, args))
    return found


def env_of(stage: Stage) -> dict[str, str]:
    """A stage's ENV as a mapping (``KEY=VALUE`` pairs, quotes removed)."""
    values: dict[str, str] = {}
    for args in stage.all("ENV"):
        for pair in shlex.split(args):
            key, _, value = pair.partition("=")
            values[key] = value
    return values


def exec_form(args: str) -> list[str]:
    parsed = json.loads(args)
    assert isinstance(parsed, list) and all(isinstance(a, str) for a in parsed), args
    return parsed


def test_the_dockerfile_is_multi_stage_non_root_exec_form_with_a_health_check() -> None:
    """Two stages (the final one copies only the built venv from the first), a non-root USER, $PORT
    and DATA_DIR set, /data a volume, a HEALTHCHECK on /healthz and a CMD in exec form that runs
    `threadbound serve` itself (no shell wrapper, so SIGTERM reaches the app)."""
    build, final = stages()
    assert build.name == "build" and final.name == ""
    assert all(args.startswith("--from=build ") or "--from" not in args for args in final.all("COPY"))
    assert final.all("COPY")[0].startswith("--from=build ")
    [user] = final.all("USER")
    assert user not in ("root", "0")
    env = env_of(final)
    assert env["PORT"] and env["DATA_DIR"] == "/data" and float(env["SHUTDOWN_GRACE"]) > 0
    assert final.all("VOLUME") == ['["/data"]'] and final.all("EXPOSE") == [env["PORT"]]
    [cmd] = final.all("CMD")
    assert exec_form(cmd) == ["threadbound", "serve"]
    assert not final.all("ENTRYPOINT") and final.all("STOPSIGNAL") == ["SIGTERM"]
    [health] = final.all("HEALTHCHECK")
    options, _, command = health.partition(" CMD ")
    assert "--interval=" in options and "/healthz" in " ".join(exec_form(command))


def test_the_build_context_is_what_the_copies_need_and_nothing_secret() -> None:
    """Every COPY source exists and is let through by .dockerignore, which keeps .env, local
    environments, data, tests and docs out of the build context."""
    ignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    assert ignore[0] == "*"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for stage in stages():
        for args in stage.all("COPY"):
            if args.startswith("--from"):
                continue
            *sources, _ = [a for a in args.split() if not a.startswith("--")]
            for source in sources:
                assert (ROOT / source).exists(), source
                assert source.rstrip("/") in allowed, source
    assert not allowed & {".env", ".venv", "data", "tests", "docs", ".git"}


def test_compose_runs_two_instances_on_postgres_and_the_playground_for_a_first_try() -> None:
    """compose.yaml: Postgres with a health check, two threadbound instances on it that stop with a
    grace longer than SHUTDOWN_GRACE + 10 s, and a playground (--demo) behind a profile, on loopback."""
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert "healthcheck" in services["postgres"]
    instances = [s for name, s in services.items() if name.startswith("threadbound-")]
    assert len(instances) == 2
    for service in instances:
        assert service["environment"]["DATABASE_URL"].startswith("postgresql://")
        grace = float(service["environment"]["SHUTDOWN_GRACE"])
        assert float(service["stop_grace_period"].rstrip("s")) > grace + 10  # docs/deploy.md#shutdown
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
    playground = services["playground"]
    assert playground["command"] == ["threadbound", "playground", "--demo"]
    assert playground["profiles"] == ["playground"]
    assert all(port.startswith("127.0.0.1:") for port in playground["ports"])


def _wheelhouse() -> Path:
    """Wheels of every runtime dependency and of the build backend, built once per dependency set
    from the package registry with pip's cache, so the install step runs offline after that."""
    pins = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    key = hashlib.sha256((pins + sys.version).encode()).hexdigest()[:16]
    house = Path.home() / ".cache" / "threadbound-tests" / f"wheelhouse-{key}"
    if (house / ".complete").is_file():
        return house
    house.mkdir(parents=True, exist_ok=True)
    requirements = [line for line in pins.splitlines() if line and line[0] not in "#."]
    build_backend = ["setuptools>=68", "wheel"]
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(house), *build_backend, *requirements]
    subprocess.run(pip_wheel, check=True, timeout=900)
    (house / ".complete").write_text("ok\n")
    return house


def _build_context(into: Path, build: Stage) -> None:
    """The files the build stage's COPY lines name, copied from the repository into its WORKDIR."""
    for args in build.all("COPY"):
        *sources, target = args.split()
        for source in sources:
            path = ROOT / source
            destination = into / (target if target not in ("./", ".") else "") / path.name
            if target.startswith("./") and target != "./":
                destination = into / target
            if path.is_dir():
                shutil.copytree(path, destination, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, destination)


def _clean_env(home: Path, **values: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", **values}


async def _health(env: dict[str, str], command: list[str], cwd: Path) -> bool:
    proc = await asyncio.create_subprocess_exec(*command, env=env, cwd=cwd)
    return await proc.wait() == 0


@pytest.mark.process
@pytest.mark.timeout(1200)
async def test_the_images_install_and_start_steps_run_in_a_clean_environment(tmp_path: Path) -> None:
    """The build stage's RUN lines, run as written in a fresh venv ($VENV) from the files its COPY
    lines name, install the app; the final stage's CMD (exec form) then serves on $PORT with its ENV,
    the HEALTHCHECK's command passes, /readyz is ready, and SIGTERM ends it with exit 0 within
    SHUTDOWN_GRACE."""
    build, final = stages()
    house = await asyncio.to_thread(_wheelhouse)
    src, app_dir, venv = tmp_path / "src", tmp_path / "app", tmp_path / "venv"
    src.mkdir()
    app_dir.mkdir()
    _build_context(src, build)
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house)}
    env = _clean_env(tmp_path, **{**env_of(build), "VENV": str(venv), **offline})
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # `python` is the base image's
    started = time.monotonic()
    for line in build.all("RUN"):
        done = await asyncio.to_thread(
            subprocess.run, ["sh", "-c", line], cwd=src, env=env, timeout=600, capture_output=True, text=True
        )
        assert done.returncode == 0, f"RUN {line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    installed = time.monotonic() - started
    port = free_port()
    runtime = {**env_of(final), "PORT": str(port), "DATA_DIR": str(tmp_path / "data")}
    runtime["PATH"] = runtime["PATH"].replace("/opt/threadbound", str(venv)).replace("${PATH}", env["PATH"])
    grace = float(runtime["SHUTDOWN_GRACE"])
    [cmd] = final.all("CMD")
    [health] = final.all("HEALTHCHECK")
    async with FakeSlack(token=TOKEN) as slack:
        serve_env = _clean_env(
            tmp_path,
            **runtime,
            SLACK_BOT_TOKEN=TOKEN,
            SLACK_SIGNING_SECRET="0123456789abcdef0123456789abcdef",
            SLACK_API_URL=slack.api_url,
            MODEL="openai-chat:gpt-4o-mini",
            OPENAI_API_KEY="sk-test-0123456789abcdef",
            OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        )
        server = await asyncio.create_subprocess_exec(*exec_form(cmd), env=serve_env, cwd=app_dir)
        try:
            check = exec_form(health.partition(" CMD ")[2])
            deadline = time.monotonic() + 60
            while not await _health(serve_env, check, app_dir):
                assert server.returncode is None, "the server exited before it was healthy"
                assert time.monotonic() < deadline, "the HEALTHCHECK never passed"
                await asyncio.sleep(0.5)
            async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/readyz") as ready:
                assert ready.status == 200
            server.send_signal(signal.SIGTERM)
            stopping = time.monotonic()
            code = await asyncio.wait_for(server.wait(), timeout=grace + 5)
            assert code == 0
            assert time.monotonic() - stopping <= grace
        finally:
            if server.returncode is None:
                server.kill()
                await server.wait()
    print(f"install {installed:.0f} s")  # shown with -s: how long the image's install step takes
    assert os.access(venv / "bin" / "threadbound", os.X_OK)
