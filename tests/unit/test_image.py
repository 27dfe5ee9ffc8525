"""The daemon's image (deploy/docker/Dockerfile, .dockerignore, its health check) and the cdcsync compose service."""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import socket
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.unit.compose_support import (
    DAEMON,
    LOCAL,
    REPO,
    SERVICES,
    command,
    compose,
    daemon_metrics_address,
    environment,
    exec_form,
    image,
    listeners,
    mounts,
    pom_versions,
    service,
    stack_env,
    stages,
    the_published_port,
)

UNIT = REPO / "deploy/systemd/cdcsync.service"
INSTALL_SH = LOCAL / "install.sh"
DEBIAN_CODENAME = "bookworm"  # Debian 12, whose packages the local stack runs
# The database services' own variables for the user, password and database a source logs in with.
CREDENTIALS = {
    "postgres": ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"),
    "mariadb": ("MARIADB_USER", "MARIADB_PASSWORD", "MARIADB_DATABASE"),
}


@cache
def unit() -> dict[str, list[str]]:
    """deploy/systemd/cdcsync.service's [Service] settings, each key's values in order."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in map(str.strip, UNIT.read_text().splitlines()):
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def unit_setting(key: str) -> str:
    assert key in unit(), f"{UNIT.name} sets no {key} (test out of date?)"
    return unit()[key][-1]


def unit_environment() -> dict[str, str]:
    return dict(word.split("=", 1) for value in unit().get("Environment", []) for word in shlex.split(value))


def seconds(value: str) -> float:
    """A systemd or Docker duration: `300` (systemd: seconds), `150s`, `5m`, `1m30s`, `500ms`."""
    text = str(value).replace(" ", "")
    assert re.fullmatch(r"(\d+(\.\d+)?(ms|min|s|m|h)?)+", text), f"not a duration: {value!r}"
    units = {"ms": 0.001, "s": 1, "min": 60, "m": 60, "h": 3600, "": 1}
    return sum(float(n) * units[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)(ms|min|s|m|h)?", text))


def size_bytes(value: str) -> int:
    """A systemd or Docker size: `6G`, `6g`, `512m`, `1024` (bytes); both count in powers of 1024."""
    found = re.fullmatch(r"(\d+)([kmgt]?)b?", str(value).strip().lower())
    assert found, f"not a size: {value!r}"
    return int(found[1]) * 1024 ** ("kmgt".index(found[2]) + 1 if found[2] else 0)


def run_option(name: str) -> Any:
    """`cdcsync run`'s click option ``name`` (its default and environment variable)."""
    from cdcsync.cli.run import run

    return next(p for p in run.params if p.name == name)


def daemon_environment() -> dict[str, str]:
    """What the daemon's process sees that this repository sets: the image's ENV, then the service's."""
    return {**image().env(), **environment(DAEMON)}


def daemon_config() -> Any:
    """The effective config of the cdcsync service: its mounted file read by cdcsync itself, with its environment."""
    from cdcsync.config.file import load_config

    env = daemon_environment()
    source = mounts(DAEMON).get(env["CDCSYNC_CONFIG"])
    assert source is not None, f"{DAEMON}: nothing from the repository is mounted at CDCSYNC_CONFIG"
    return load_config(source, env=env)


def project() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def maven_call(text: str) -> dict[str, Any]:
    """The `mvn ... dependency:copy-dependencies` call in a shell text: goals, -P/-s/-f, -D defines, flags."""
    joined = text.replace("\\\n", " ")
    line = next(ln for ln in joined.splitlines() if re.search(r"\bmvn\b", ln) and "dependency:" in ln)
    words = shlex.split(line[line.index("mvn") :])
    out: dict[str, Any] = {"goals": [], "defines": {}, "flags": set()}
    rest = iter(words[1:])
    for word in rest:
        if word in ("&&", "||", "|", ";") or word.startswith(">") or ">&" in word:
            break
        if word in ("-P", "-s", "-f"):
            out[word] = next(rest)
        elif word.startswith("-D"):
            key, _, value = word[2:].partition("=")
            out["defines"][key] = value
        elif word.startswith("-"):
            out["flags"].add(word)
        else:
            out["goals"].append(word.rstrip(";"))
    return out


def glob_regex(pattern: str) -> str:
    """A .dockerignore pattern as Docker matches it: `**` any directories, `*` and `?` within one name."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] in "*?":
            out, i = out + ("[^/]*" if pattern[i] == "*" else "[^/]"), i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


def dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` out of the context: the last rule matching it or a parent decides."""
    rules = []
    for line in map(str.strip, (REPO / ".dockerignore").read_text().splitlines()):
        if line and not line.startswith("#"):
            pattern = posixpath.normpath(line.removeprefix("!").strip().lstrip("/"))
            rules.append((line.startswith("!"), re.compile(glob_regex(pattern))))
    parts = path.split("/")
    candidates = [path, *("/".join(parts[:i]) for i in range(1, len(parts)))]
    excluded = False
    for negated, regex in rules:
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not negated
    return excluded


def git_files(*args: str) -> set[str]:
    done = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", *args], capture_output=True, text=True)
    assert done.returncode == 0, f"git ls-files: {done.stderr}"
    return {f for f in done.stdout.split("\0") if f and (REPO / f).is_file()}


def test_the_image_runs_what_the_service_unit_runs() -> None:
    final, exec_start = image(), shlex.split(unit_setting("ExecStart"))
    entrypoint, cmd = exec_form(final.all("ENTRYPOINT")[-1]), exec_form(final.all("CMD")[-1])
    assert Path(entrypoint[-1]).name == Path(exec_start[0]).name == "cdcsync", (
        f"ENTRYPOINT {entrypoint} does not end with the unit's command {exec_start[0]}"
    )
    assert cmd == exec_start[1:], f"CMD {cmd}, the unit runs {exec_start}"
    assert command(DAEMON) in ([], exec_start[1:]), f"{DAEMON}: command {command(DAEMON)}, the unit runs {exec_start}"
    env, wanted = final.env(), unit_environment()
    for key in ("CDCSYNC_CONFIG", "CDCSYNC_STATE_DIR"):
        assert key in wanted, f"{UNIT.name} sets no {key} (test out of date?)"
        assert env.get(key) == wanted[key], f"image ENV {key}={env.get(key)!r}, the unit's {wanted[key]!r}"
    assert final.workdir == unit_setting("WorkingDirectory"), f"WORKDIR {final.workdir}, the unit's is not"
    user = (final.all("USER") or ["root"])[-1].split(":")[0]
    assert user not in ("root", "0"), "the image runs as root; the unit runs as its own user"
    stop = (final.all("STOPSIGNAL") or ["SIGTERM"])[-1]
    assert stop == (unit().get("KillSignal") or ["SIGTERM"])[-1], f"STOPSIGNAL {stop}: the unit stops it otherwise"
    check = final.healthcheck
    assert check is not None, "the image has no HEALTHCHECK"
    start, allowed = seconds(check[0].get("start-period", "0s")), unit_setting("TimeoutStartSec")
    assert start == seconds(allowed), f"HEALTHCHECK --start-period={start:g}s, the unit's TimeoutStartSec={allowed}"


def test_the_daemon_service_restarts_stops_and_is_capped_as_the_unit_is() -> None:
    spec = service(DAEMON)
    assert spec.get("restart") == unit_setting("Restart"), f"{DAEMON}: restart {spec.get('restart')!r}"
    grace = seconds(str(spec.get("stop_grace_period", "10s")))
    assert grace == seconds(unit_setting("TimeoutStopSec")), (
        f"{DAEMON}: stop_grace_period {grace:g}s, the unit waits TimeoutStopSec={unit_setting('TimeoutStopSec')} "
        "for the queries to stop between batches"
    )
    limit = size_bytes(str(spec.get("mem_limit", "0")))
    assert limit == size_bytes(unit_setting("MemoryMax")), f"{DAEMON}: mem_limit {spec.get('mem_limit')!r}"


def test_the_image_python_is_the_one_the_project_is_checked_against() -> None:
    meta = project()
    checked = meta["tool"]["mypy"]["python_version"]
    assert meta["tool"]["ruff"]["target-version"] == "py" + checked.replace(".", ""), "ruff and mypy target differ"
    pythons = {s.base for s in stages() if s.base.startswith("python:")}
    # The virtualenv is built in one stage and run in another: both must be the same Python.
    assert len(pythons) == 1 and image().base in pythons, f"want one Python image, the final stage's: {pythons}"
    tag = pythons.pop().split(":", 1)[1]
    found = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)-slim-(\w+)", tag)
    assert found, f"python:{tag} is not an exact version (python:X.Y.Z-slim-CODENAME)"
    assert f"{found[1]}.{found[2]}" == checked, f"python:{tag}, the project is checked against Python {checked}"
    minimum = re.fullmatch(r">=\s*(\d+)\.(\d+)", meta["project"]["requires-python"])
    assert minimum and (int(found[1]), int(found[2])) >= (int(minimum[1]), int(minimum[2])), "requires-python"
    assert found[4] == DEBIAN_CODENAME, f"python:{tag} is not on {DEBIAN_CODENAME}, the local stack's Debian"


def test_the_image_java_is_the_local_stack_major() -> None:
    installed = set(re.findall(r"\bopenjdk-(\d+)-j", INSTALL_SH.read_text()))
    assert len(installed) == 1, f"install.sh installs openjdk {installed}, want one major (test out of date?)"
    major = installed.pop()
    javas = [s for s in stages() if "temurin" in s.base]
    assert javas, "no Java image in the Dockerfile"
    for java in javas:
        tag = java.base.split(":", 1)[1]
        exact = re.match(r"(\d+)\.\d+\.\d+_\d+", tag) if java.base.startswith("eclipse-temurin:") else None
        found = exact or re.search(r"eclipse-temurin-(\d+)\b", tag)
        assert found and found[1] == major, f"FROM {java.base}: Java {found and found[1]}, install.sh's is {major}"
    env = image().env()
    home = env.get("JAVA_HOME", "")
    jre = [c for c in image().copies() if c.dest == home and c.stage in {j.name for j in javas}]
    assert jre, f"JAVA_HOME={home!r} is not the Java copied from {[j.name for j in javas]}"
    assert f"{home}/bin" in env.get("PATH", "").split(":"), "the JVM is not on PATH (pyspark runs `java`)"


def test_the_image_resolves_the_spark_jars_as_install_sh_does(tmp_path: Path) -> None:
    script = INSTALL_SH.read_text()
    profile = re.search(r'^mvn_profile (\S+) "\$state/lib/spark"$', script, re.M)
    assert profile, "install.sh resolves no profile into $state/lib/spark (test out of date?)"
    local = maven_call(script)
    runs = [(s, wd, args) for s in stages() for kw, args, wd in s.walk() if kw == "RUN" and "dependency:" in args]
    assert len(runs) == 1, "want one Maven call in the Dockerfile"
    fetch, workdir, run = runs[0]
    docker = maven_call(run)
    assert docker.get("-P") == profile[1], f"the Dockerfile resolves profile {docker.get('-P')}, not {profile[1]}"
    assert (docker["goals"], docker["flags"]) == (local["goals"], local["flags"]), f"{docker}, install.sh: {local}"
    paths = ("maven.repo.local", "outputDirectory")  # where, not what
    same = {k: v for k, v in local["defines"].items() if k not in paths}
    assert {k: v for k, v in docker["defines"].items() if k not in paths} == same, f"-D {docker['defines']}: {same}"
    placed = fetch.placed()
    for option, file in (("-f", "pom.xml"), ("-s", "maven-settings.xml")):
        assert Path(local[option]).name == file, f"install.sh: {option} {local[option]} (test out of date?)"
        inside = posixpath.normpath(posixpath.join(workdir, docker.get(option, "pom.xml")))
        assert placed.get(inside) == f"deploy/local/{file}", f"the Dockerfile's {option} is not deploy/local/{file}"
    # The jars land where the daemon looks for them.
    out = docker["defines"].get("outputDirectory", "")
    copied = [c for c in image().copies() if c.stage == fetch.name and out in c.sources]
    assert len(copied) == 1, f"the final stage does not copy {out} from stage {fetch.name}"
    names = [k for k, v in image().env().items() if v == copied[0].dest]
    assert names, f"no ENV points the daemon at {copied[0].dest}"
    jars = tmp_path / "jars"
    jars.mkdir()
    wanted = {"spark-sql-kafka-0-10_2.13-4.0.0.jar", "delta-spark_2.13-4.0.0.jar"}
    for jar in wanted:
        (jars / jar).touch()
    env = {k: v for k, v in os.environ.items() if k != "CDCSYNC_SPARK_JARS"}
    env["CDCSYNC_STATE_DIR"] = str(tmp_path / "state")  # holds no jars: they must come from the ENV
    env.update({name: str(jars) for name in names})
    # In a process of its own: the daemon's lookup imports pyspark, which the test run's process must not before
    # its first Spark driver starts (a driver launched after it, in that process, crashed in its fork).
    found = subprocess.run(
        [sys.executable, "-c", "from cdcsync.driver import connector_jars; print(*(j.name for j in connector_jars()))"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert set(found.stdout.split()) == wanted
    # pyspark and delta-spark come from pyproject, their jars from the pom: one version each.
    pins = dict(re.sub(r"\[.*?\]", "", d).split("==", 1) for d in project()["project"]["dependencies"] if "==" in d)
    versions = pom_versions()
    assert pins.get("pyspark") == versions["spark.version"], f"pyspark {pins.get('pyspark')}, pom's Spark differs"
    assert pins.get("delta-spark") == versions["delta.version"], f"delta-spark {pins.get('delta-spark')}, pom's differs"


def test_the_image_installs_the_project_with_its_pinned_dependencies() -> None:
    meta = project()
    loose = [d for d in meta["project"]["dependencies"] if "==" not in d]
    assert not loose, f"pyproject.toml: not pinned, so the image may differ from the tested stack: {loose}"
    runs = [(s, wd, args) for s in stages() for kw, args, wd in s.walk() if kw == "RUN" and "pip install" in args]
    assert len(runs) == 1, "want one `pip install` in the Dockerfile"
    built, workdir, run = runs[0]
    assert re.search(r"\bpip install --no-cache-dir \.(\s|$)", run), f"RUN {run!r}: want `pip install --no-cache-dir .`"
    needed = ["pyproject.toml", meta["project"]["readme"], *meta["tool"]["setuptools"]["package-dir"].values()]
    placed = built.placed()
    for path in needed:
        inside = posixpath.join(workdir, path)
        assert placed.get(inside) == path, f"{path} is not copied to {inside}, where `pip install .` reads it"
    venv = re.search(r"(\S+)/bin/pip install", run)
    assert venv, f"RUN {run!r}: want a virtualenv's pip"
    copied = [c for c in image().copies() if c.stage == built.name and venv[1] in c.sources]
    # A virtualenv is not relocatable: it must run where it was made.
    assert [c.dest for c in copied] == [venv[1]], f"the final stage does not copy {venv[1]} to the same path"
    assert image().env().get("PATH", "").split(":")[0] == f"{venv[1]}/bin", "the virtualenv is not first on PATH"


def test_every_base_image_and_debian_package_is_pinned() -> None:
    names = {s.name for s in stages() if s.name}
    for each in stages():
        tag = each.base.partition(":")[2]
        assert each.base in names or re.match(r"\d+\.\d+\.\d+", tag), f"FROM {each.base}: not an exact version"
        for run in each.all("RUN"):
            for found in re.finditer(r"apt-get install ([^&;|]+)", run):
                packages = [w for w in found[1].split() if not w.startswith("-")]
                assert packages and all("=" in p for p in packages), f"apt-get install {found[1]}: pin each version"


def test_the_build_context_holds_exactly_what_the_image_copies() -> None:
    sources = [src for s in stages() for c in s.copies() if c.stage is None for src in c.sources]

    def copied(path: str) -> bool:
        return any(path == src or path.startswith(src + "/") for src in sources)

    files, ignored = git_files("--cached", "--others"), git_files("--others", "--ignored", "--exclude-standard")
    sent = {f for f in files if not dockerignored(f)}
    unused = sorted(f for f in sent if not copied(f))
    assert not unused, f"sent in the build context, but copied by no stage: {unused[:10]}"
    assert not sent & ignored, f"sent, though git ignores them: {sorted(sent & ignored)[:10]}"
    for path in (".git/HEAD", "artifacts/a", "spark-warehouse/a", ".venv/bin/python", "cdcsync.egg-info/PKG-INFO",
                 "cdcsync/__pycache__/a.cpython-311.pyc", "tests/unit/test_compose.py"):  # fmt: skip
        assert dockerignored(path), f".dockerignore sends {path}"
    for src in sources:
        wanted = {f for f in files - ignored if f == src or f.startswith(src + "/")}
        assert wanted, f"COPY {src}: not in the repository"
        assert wanted <= sent, f"COPY {src}: .dockerignore keeps {sorted(wanted - sent)[:5]} out of the context"


def test_the_image_health_check_asks_the_daemons_healthz() -> None:
    from cdcsync import metrics

    check = image().healthcheck
    assert check is not None, "the image has no HEALTHCHECK"
    options, argv = check
    assert argv[0] in ("python", "python3"), f"HEALTHCHECK {argv}: the image's Python runs it"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The check reads the variable `cdcsync run` takes its port from; here it points at a port of this test.
    env = {**os.environ, **image().env(), run_option("metrics_port").envvar: str(port)}
    env["PATH"] = os.environ["PATH"]

    def health_check() -> int:
        timeout = seconds(options.get("timeout", "30s"))
        return subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=timeout).returncode

    healthy = [True]
    server = metrics.serve(port, health=lambda: (healthy[0], [] if healthy[0] else ["follower cache stopped"]))
    try:
        assert health_check() == 0, "HEALTHCHECK fails on a healthy daemon"
        healthy[0] = False
        assert health_check() != 0, "HEALTHCHECK passes while /healthz answers 503"
    finally:
        server.shutdown()
        server.server_close()
    assert health_check() != 0, "HEALTHCHECK passes with no daemon listening"


def test_the_daemon_publishes_its_metrics_port_as_the_local_stack_does() -> None:
    port_option, host_option = run_option("metrics_port"), run_option("metrics_host")
    default = daemon_metrics_address()[1]
    assert int(stack_env()["METRICS_PORT"]) == default, f"stack.env METRICS_PORT, `cdcsync run`'s default {default}"
    exposed = [int(p.split("/")[0]) for args in image().all("EXPOSE") for p in args.split()]
    assert exposed == [default], f"EXPOSE {exposed}, the daemon's metrics port is {default}"
    env = daemon_environment()
    assert int(env.get(port_option.envvar, default)) == default, f"{port_option.envvar} moves the port"
    # The health check asks 127.0.0.1, a published port arrives on the container's own address: both need this.
    assert env.get(host_option.envvar) == "0.0.0.0", f"{host_option.envvar}={env.get(host_option.envvar)!r}"
    port = the_published_port(DAEMON)
    assert (port.host_ip, port.host_port, port.container_port) == ("127.0.0.1", default, default), (
        f"{DAEMON}: publishes {port}, want 127.0.0.1:{default}:{default} as the local stack serves it"
    )


def test_the_daemon_service_reaches_the_containers_and_waits_for_them() -> None:
    config = daemon_config()
    advertised = listeners(environment("kafka")["KAFKA_ADVERTISED_LISTENERS"]).values()
    kafka_internal = [a for a in advertised if a[0] == "kafka"]
    reached: list[tuple[str, str | None, int | None]] = [("connect.url", *address(config.connect.url))]
    reached += [("kafka.bootstrap_servers", *address("//" + s)) for s in config.kafka.bootstrap_servers.split(",")]
    reached += [(f"sources[{s.name}]", s.host, s.port) for s in config.sources]
    reached += [(f"followers[{f.name}].url", *address(f.url)) for f in config.followers if f.url]
    depends = service(DAEMON).get("depends_on") or {}
    for what, host, port in reached:
        assert host in SERVICES, f"{DAEMON}: {what} is {host}:{port}, not a stack service (set its CDCSYNC_* variable)"
        want = kafka_internal[0][1] if host == "kafka" else the_published_port(host).container_port
        assert port == want, f"{DAEMON}: {what} is {host}:{port}, {host} listens on {want} in the compose network"
        assert (depends.get(host) or {}).get("condition") == "service_healthy", f"{DAEMON}: does not wait for {host}"
    assert set(depends) == {host for _, host, _ in reached}, f"{DAEMON}: depends_on {sorted(depends)}"
    for index, source in enumerate(config.sources):
        user, password, database = (environment(source.host)[key] for key in CREDENTIALS[source.host])
        actual = (source.user, source.password.get_secret_value(), source.database)
        assert actual == (user, password, database), f"{DAEMON}: sources[{source.name}] cannot log in to {source.host}"
        origin = config.origin.get(f"sources[{index}].password", "")
        assert origin.startswith("environment variable"), f"{DAEMON}: sources[{source.name}].password is not from env"


def address(url: str) -> tuple[str | None, int | None]:
    parts = urlsplit(url)
    return parts.hostname, parts.port


def test_the_daemon_keeps_state_in_a_named_volume_and_shares_connects_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdcsync.state import base_dir

    env = daemon_environment()
    volumes = {str(v).split(":")[1]: str(v) for v in service(DAEMON).get("volumes") or []}
    state = volumes.get(env["CDCSYNC_STATE_DIR"], "")
    assert state.split(":")[0] in (compose().get("volumes") or {}), f"{DAEMON}: the state directory is no named volume"
    monkeypatch.setenv("CDCSYNC_STATE_DIR", env["CDCSYNC_STATE_DIR"])
    assert str(base_dir(daemon_config())) == env["CDCSYNC_STATE_DIR"], "the config moves the state off the volume"
    config = volumes.get(env["CDCSYNC_CONFIG"], "")
    assert config.endswith(":ro"), f"{DAEMON}: the config at {env['CDCSYNC_CONFIG']} is not mounted read-only"
    # `connectors apply` writes the secrets where Connect reads them, at the path the connector configs name.
    secrets = env.get("CDCSYNC_CONNECT_SECRETS_DIR", "")
    allowed = environment("connect").get("CONNECT_CONFIG_PROVIDERS_FILE_PARAM_ALLOWED_PATHS")
    assert secrets == allowed, f"{DAEMON}: CDCSYNC_CONNECT_SECRETS_DIR={secrets!r}, Connect reads {allowed!r}"
    theirs = {str(v).split(":")[1]: str(v).split(":")[0] for v in service("connect").get("volumes") or []}
    mine = volumes.get(secrets, "")
    assert mine.split(":")[0] == theirs.get(secrets), f"{DAEMON}: {secrets} is not Connect's directory"
    assert not mine.endswith(":ro"), f"{DAEMON}: {secrets} read-only, `connectors apply` writes there"
