"""Readers of docker-compose.yml, deploy/local and deploy/docker/Dockerfile shared by the compose and image tests."""

from __future__ import annotations

import importlib.util
import json
import posixpath
import shlex
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
LOCAL = REPO / "deploy/local"
SERVICES = {"postgres", "mariadb", "redis", "seaweedfs", "kafka", "connect", "elasticsearch"}
MONITORING = {"prometheus", "grafana"}  # not stack components: they watch the daemon (deploy/monitoring)
DAEMON = "cdcsync"  # `cdcsync run`, from deploy/docker/Dockerfile


# --------------------------------------------------------------------------- what the local stack does


@cache
def load_stack() -> ModuleType:
    """A private copy of deploy/local/stack.py (stdlib only; importing it starts nothing)."""
    name = "_cdcsync_stack_for_compose_test"
    spec = importlib.util.spec_from_file_location(name, LOCAL / "stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def stack_env() -> dict[str, str]:
    return load_stack().read_env_file(LOCAL / "stack.env")


def pom_versions() -> dict[str, str]:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = ET.parse(LOCAL / "pom.xml").getroot().find("m:properties", ns)
    assert props is not None, "deploy/local/pom.xml has no <properties>"
    return {child.tag.split("}")[1]: (child.text or "").strip() for child in props}


def flags(argv: list[str]) -> dict[str, str | None]:
    """`--name=value` and bare `--name` (-> None) flags of a command line."""
    out: dict[str, str | None] = {}
    for arg in argv:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            out[name] = value if "=" in arg else None
    return out


# --------------------------------------------------------------------------- what docker-compose.yml says


@cache
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def service(name: str) -> dict[str, Any]:
    services = compose().get("services") or {}
    assert name in services, f"docker-compose.yml: no service {name!r}"
    return services[name]


def environment(name: str) -> dict[str, str]:
    raw = service(name).get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    return {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in raw.items()}


def command(name: str) -> list[str]:
    raw = service(name).get("command") or []
    return shlex.split(raw) if isinstance(raw, str) else [str(arg) for arg in raw]


@dataclass(frozen=True)
class Published:
    host_ip: str
    host_port: int
    container_port: int


def published_ports(name: str) -> list[Published]:
    out = []
    for entry in service(name).get("ports") or []:
        if isinstance(entry, dict):
            out.append(Published(str(entry.get("host_ip", "")), int(entry["published"]), int(entry["target"])))
            continue
        parts = str(entry).split("/")[0].split(":")
        assert len(parts) == 3, f"{name}: port {entry!r} names no host address (want 127.0.0.1:HOST:CONTAINER)"
        out.append(Published(parts[0], int(parts[1]), int(parts[2])))
    return out


def the_published_port(name: str) -> Published:
    ports = published_ports(name)
    assert len(ports) == 1, f"{name}: publishes {len(ports)} ports, want exactly one (its stack.env port)"
    return ports[0]


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """'NAME://host:port,...' -> {NAME: (host, port)}."""
    out = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        out[name] = (host, int(port))
    return out


def mounts(name: str) -> dict[str, Path]:
    """Container path -> repository path of a service's bind mounts."""
    out = {}
    for volume in service(name).get("volumes") or []:
        source, target = str(volume).split(":")[:2]
        if source.startswith("."):
            out[target] = (REPO / source).resolve()
    return out


def daemon_metrics_address() -> tuple[str, int]:
    """Where `cdcsync run` serves its metrics unless told: the config's ``metrics`` defaults."""
    from cdcsync.config.runtime import MetricsSettings

    defaults = MetricsSettings()
    return defaults.host, defaults.port


# --------------------------------------------------------------------------- the daemon's Dockerfile


@dataclass(frozen=True)
class Copy:
    """A COPY: ``stage`` is its --from (None: the build context), ``dest`` an absolute path in the image."""

    stage: str | None
    sources: tuple[str, ...]
    dest: str
    to_directory: bool

    def placed(self, source: str, is_dir: bool) -> str:
        """Where ``source`` lands: a directory's contents go into ``dest``, a file into it or as it."""
        return self.dest if is_dir or not self.to_directory else posixpath.join(self.dest, posixpath.basename(source))


@dataclass
class Stage:
    """One FROM of a Dockerfile: its base image, its name and its instructions (keyword, arguments) in order."""

    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def walk(self) -> Iterable[tuple[str, str, str]]:
        """(keyword, arguments, the WORKDIR it runs in)."""
        workdir = "/"
        for keyword, args in self.instructions:
            if keyword == "WORKDIR":
                workdir = posixpath.normpath(posixpath.join(workdir, args))
            yield keyword, args, workdir

    @property
    def workdir(self) -> str:
        return [wd for _, _, wd in self.walk()][-1] if self.instructions else "/"

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for args in self.all("ENV"):
            words = shlex.split(args)
            if words and "=" not in words[0]:  # the old `ENV key value` form
                out[words[0]] = " ".join(words[1:])
            else:
                out.update(word.split("=", 1) for word in words)
        return out

    def copies(self) -> list[Copy]:
        out = []
        for keyword, args, workdir in self.walk():
            if keyword != "COPY":
                continue
            words = exec_form(args) if args.startswith("[") else shlex.split(args)
            options = dict(w[2:].split("=", 1) for w in words if w.startswith("--") and "=" in w)
            paths = [w for w in words if not w.startswith("--")]
            dest = posixpath.normpath(posixpath.join(workdir, paths[-1]))
            to_directory = paths[-1].endswith(("/", ".")) or len(paths) > 2
            out.append(Copy(options.get("from"), tuple(p.rstrip("/") for p in paths[:-1]), dest, to_directory))
        return out

    def placed(self) -> dict[str, str]:
        """Image path -> build-context path, for what this stage copies from the context."""
        return {
            copy.placed(source, (REPO / source).is_dir()): source
            for copy in self.copies()
            if copy.stage is None
            for source in copy.sources
        }

    @property
    def healthcheck(self) -> tuple[dict[str, str], list[str]] | None:
        """The last HEALTHCHECK's options and command; None without one (or with NONE)."""
        found = self.all("HEALTHCHECK")
        if not found:
            return None
        rest, options = found[-1], {}
        while rest.startswith("--"):
            option, _, rest = rest.partition(" ")
            key, _, value = option[2:].partition("=")
            options[key], rest = value, rest.lstrip()
        kind, _, rest = rest.partition(" ")
        if kind.upper() == "NONE":
            return None
        assert kind.upper() == "CMD", f"HEALTHCHECK {found[-1]!r}: want CMD"
        return options, exec_form(rest.strip())


def exec_form(args: str) -> list[str]:
    """A Dockerfile command: JSON (exec form) as it is, a shell string as `/bin/sh -c` runs it."""
    return [str(a) for a in json.loads(args)] if args.startswith("[") else ["/bin/sh", "-c", args]


@cache
def dockerfile_path() -> Path:
    build = service(DAEMON).get("build")
    assert isinstance(build, dict) and build.get("dockerfile"), f"{DAEMON}: want `build:` with context and dockerfile"
    context = (REPO / str(build.get("context", "."))).resolve()
    assert context == REPO, f"{DAEMON}: build context {context}, want the repository root (its .dockerignore)"
    path = context / str(build["dockerfile"])
    assert path.is_file(), f"{DAEMON}: {path} does not exist"
    return path


@cache
def stages() -> list[Stage]:
    """The Dockerfile's stages. Comments go first, also inside continued lines, as Docker's parser drops them."""
    logical, pending = [], ""
    for line in dockerfile_path().read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    out: list[Stage] = []
    for line in filter(str.strip, logical):
        keyword, _, args = line.strip().partition(" ")
        if keyword.upper() == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            out.append(Stage(words[0], words[2] if len(words) == 3 and words[1].upper() == "AS" else ""))
        else:
            assert out, f"{dockerfile_path()}: {keyword} before any FROM"
            out[-1].instructions.append((keyword.upper(), " ".join(args.split())))
    return out


def image() -> Stage:
    return stages()[-1]
