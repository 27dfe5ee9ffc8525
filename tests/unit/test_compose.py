"""docker-compose.yml must describe the same stack as `make up` (deploy/local/stack.py).

The expected settings are not copied into this test: it runs stack.py's own
start functions with every process launch replaced by a recorder, then reads
the configuration files they wrote and the command lines they would have run.
So a setting added to or changed in stack.py, stack.env or pom.xml fails here,
with a message naming the setting, until docker-compose.yml follows. No network,
no Docker, no running services.

Three services are not stack components. prometheus and grafana watch a
`cdcsync run` with deploy/monitoring's files (test_compose_monitoring.py);
cdcsync is the daemon in the image deploy/docker/Dockerfile builds
(test_image.py). Here they are held only to what every service must have: a
health check, and mounts from inside the repository.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.unit import compose_support
from tests.unit.compose_support import (
    DAEMON,
    MONITORING,
    REPO,
    SERVICES,
    command,
    compose,
    environment,
    flags,
    listeners,
    load_stack,
    pom_versions,
    service,
    stack_env,
    the_published_port,
)

# The Debian 12 packages the local stack runs (install.sh installs them unpinned).
DEBIAN_IMAGES = {"postgres": "postgres:15", "mariadb": "mariadb:10.11", "redis": "redis:7.0"}
CONNECT_TOPICS = {
    "config.storage.topic": "_connect_configs",
    "offset.storage.topic": "_connect_offsets",
    "status.storage.topic": "_connect_status",
}
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"


# --------------------------------------------------------------------------- what the local stack does


@dataclass
class LocalStack:
    env: dict[str, str]
    spawned: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    mariadb_sql: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> LocalStack:
    """Run stack.py's start functions against a scratch state directory, launching nothing."""
    stack = load_stack()
    state = tmp_path_factory.mktemp("state")
    env = stack_env()
    result = LocalStack(env=env)
    done = subprocess.CompletedProcess(args=[], returncode=0, stdout="", stderr="")

    def spawn(name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
        result.spawned[name] = (list(argv), dict(env or {}))
        return 0

    def java_cmd(lib: str, heap: str, main: str, *args: str) -> list[str]:
        return ["java", f"-Xms{heap}", f"-Xmx{heap}", main, *args]

    def mariadb_sql(sql: str) -> subprocess.CompletedProcess:
        result.mariadb_sql.append(sql)
        return done

    es_home = state / "opt/elasticsearch-0"
    (es_home / "config").mkdir(parents=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stack, "ENV", env)  # stack.env itself, not this shell's overrides
        mp.setattr(stack, "STATE", state)
        pg = sys.modules["pgserver"]  # Postgres's start, which stack.py imports
        for attr in ("DATA", "LOGS", "RUN", "CONF"):
            path = state / attr.lower()
            path.mkdir()
            mp.setattr(stack, attr, path)
            if hasattr(pg, attr):
                mp.setattr(pg, attr, path)
        mp.setattr(stack, "spawn", spawn)
        mp.setattr(stack, "java_cmd", java_cmd)
        mp.setattr(stack, "weed_binary", lambda: Path("weed"))
        for module in (stack, pg):
            mp.setattr(module, "run_as_service", lambda argv, **kwargs: done)
            mp.setattr(module, "own", lambda *paths: [p.mkdir(parents=True) for p in paths if not p.exists()])
        mp.setattr(pg, "pg_bin", lambda tool: tool)
        mp.setattr(stack, "mariadb_sql", mariadb_sql)
        for name in stack.ORDER:
            stack.COMPONENTS[name].start()
        assert stack.mariadb_ready(), "stack.mariadb_ready() did not provision the user"
        result.files = {
            "postgres": (state / "data/postgres/postgresql.conf").read_text(),
            "kafka": (state / "conf/kafka.properties").read_text(),
            "connect": (state / "conf/connect.properties").read_text(),
        }
    return result


def properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.lstrip().startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def pairs_after(option: str, argv: list[str]) -> dict[str, str]:
    """`option key=value` pairs (postgres -c, elasticsearch -E)."""
    return dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv[:-1]) if arg == option)


def heap_flags(argv: list[str]) -> set[str]:
    return {arg for arg in argv if arg.startswith(("-Xms", "-Xmx"))}


def kafka_env_name(prop: str) -> str:
    """apache/kafka image rule: '_' -> '__', '-' -> '___', '.' -> '_', upper case, KAFKA_ prefix."""
    return "KAFKA_" + prop.replace("_", "__").replace("-", "___").replace(".", "_").upper()


def connect_env_name(prop: str) -> str:
    """Debezium connect image: a few named variables, else CONNECT_ + upper case with '.' -> '_'."""
    named = {
        "bootstrap.servers",
        "group.id",
        "key.converter",
        "value.converter",
        "config.storage.topic",
        "offset.storage.topic",
        "status.storage.topic",
        "offset.flush.interval.ms",
        "offset.flush.timeout.ms",
    }
    upper = prop.upper().replace(".", "_")
    return upper if prop in named else "CONNECT_" + upper


def assert_same(
    expected: Mapping[str, str | None], actual: Mapping[str, str | None], where: str, container_only: Iterable[str] = ()
) -> None:
    """docker-compose.yml (actual) sets exactly what stack.py sets (expected), bar the container's own keys."""
    wrong = [
        f"{where}: {key} is {repr(actual[key]) if key in actual else '<unset>'}, stack.py uses {value!r}"
        for key, value in expected.items()
        if key not in actual or actual[key] != value
    ]
    wrong += [
        f"{where}: {key}={actual[key]!r} is set here but not by stack.py"
        for key in actual
        if key not in expected and key not in set(container_only)
    ]
    assert not wrong, "\n".join(wrong)


# --------------------------------------------------------------------------- services, images, ports


def test_services_are_the_local_stack_components() -> None:
    names = set(compose().get("services") or {})
    want = SERVICES | MONITORING | {DAEMON}
    assert names == want, f"docker-compose.yml services {sorted(names)}, want {sorted(want)}"
    assert set(load_stack().ORDER) == SERVICES, f"stack.py components {load_stack().ORDER} are not {sorted(SERVICES)}"


def test_jvm_images_match_pom_versions() -> None:
    versions = pom_versions()
    expected = {
        "kafka": f"apache/kafka:{versions['kafka.version']}",
        # The image carries one Debezium release; the Postgres connector's (MariaDB's 3.6 is not on Central).
        "connect": f"quay.io/debezium/connect:{versions['debezium.postgres.version']}",
        "elasticsearch": f"docker.elastic.co/elasticsearch/elasticsearch:{versions['elasticsearch.version']}",
    }
    for name, image in expected.items():
        actual = service(name).get("image")
        assert actual == image, f"{name}: image {actual!r}, pom.xml pins {image!r}"


def test_the_s3_image_is_the_release_the_local_stack_builds() -> None:
    image = f"chrislusf/seaweedfs:{stack_env()['SEAWEEDFS_VERSION']}"
    actual = service("seaweedfs").get("image")
    assert actual == image, f"seaweedfs: image {actual!r}, stack.env pins {image!r}"


def test_database_images_match_debian_versions() -> None:
    for name, image in DEBIAN_IMAGES.items():
        assert service(name).get("image") == image, f"{name}: image {service(name).get('image')!r}, want {image!r}"


def test_each_service_publishes_its_stack_env_port_on_loopback() -> None:
    stack, env = load_stack(), stack_env()
    for name in SERVICES:
        key = stack.COMPONENTS[name].port_key
        port = the_published_port(name)
        assert port.host_port == int(env[key]), f"{name}: host port {port.host_port}, stack.env {key}={env[key]}"
        bound = port.host_ip or "all interfaces"
        assert port.host_ip == "127.0.0.1", f"{name}: host port {port.host_port} bound to {bound!r}, not 127.0.0.1"


def test_nothing_mounted_from_outside_the_repo() -> None:
    for name in SERVICES | MONITORING | {DAEMON}:
        for volume in service(name).get("volumes") or []:
            source = volume.get("source", "") if isinstance(volume, dict) else str(volume).split(":")[0]
            if source.startswith((".", "/", "~")):
                path = (REPO / source).resolve()
                assert path.is_relative_to(REPO), f"{name}: mounts {source}, outside the repository"
                assert path.exists(), f"{name}: mounts {source}, which does not exist"


def test_every_service_has_a_healthcheck_and_connect_waits_for_kafka() -> None:
    for name in SERVICES | MONITORING | {DAEMON}:
        check = service(name).get("healthcheck") or {}
        assert not check.get("disable") and check.get("test") != ["NONE"], f"{name}: healthcheck disabled"
        # A service built from a Dockerfile may take the image's own HEALTHCHECK.
        own = check.get("test") or ("build" in service(name) and compose_support.image().healthcheck)
        assert own, f"{name}: no healthcheck"
    depends = service("connect").get("depends_on") or {}
    assert isinstance(depends, dict) and (depends.get("kafka") or {}).get("condition") == "service_healthy", (
        "connect: depends_on kafka must be `condition: service_healthy`"
    )
    for waiter in ("connect", DAEMON):
        for name, spec in (service(waiter).get("depends_on") or {}).items():
            assert spec.get("condition") != "service_healthy" or service(name).get("healthcheck"), (
                f"{waiter} waits for {name} to be healthy, but {name} has no healthcheck"
            )


# --------------------------------------------------------------------------- per component


def test_postgres_credentials_and_settings(local: LocalStack) -> None:
    env, conf = environment("postgres"), local.files["postgres"]
    credentials = {"POSTGRES_USER": "PG_USER", "POSTGRES_PASSWORD": "PG_PASSWORD", "POSTGRES_DB": "PG_DATABASE"}
    for var, key in credentials.items():
        assert env.get(var) == local.env[key], f"postgres: {var}={env.get(var)!r}, stack.env {key}={local.env[key]!r}"
    expected = {key: value.strip("'") for key, value in properties(conf.replace(" = ", "=")).items()}
    for key in ("port", "listen_addresses", "unix_socket_directories"):  # the container's own network and paths
        expected.pop(key, None)
    argv = command("postgres")
    actual = pairs_after("-c", argv)
    assert actual.get("wal_level") == "logical", f"postgres: wal_level={actual.get('wal_level')!r}, want 'logical'"
    assert_same(expected, actual, "postgres command -c")
    target = the_published_port("postgres").container_port
    assert target == int(actual.get("port", 5432)), f"postgres: publishes container port {target}, not the server's"


def test_mariadb_credentials_and_settings(local: LocalStack) -> None:
    env = environment("mariadb")
    for key in ("MARIADB_USER", "MARIADB_PASSWORD", "MARIADB_DATABASE"):
        assert env.get(key) == local.env[key], f"mariadb: {key}={env.get(key)!r}, stack.env {key}={local.env[key]!r}"
    assert env.get("MARIADB_ROOT_PASSWORD"), "mariadb: MARIADB_ROOT_PASSWORD unset (the image refuses to start)"
    expected = flags(local.spawned["mariadb"][0])
    for key in ("no-defaults", "datadir", "port", "bind-address", "socket", "pid-file"):  # container-specific
        expected.pop(key, None)
    actual = flags(command("mariadb"))
    assert actual.get("binlog-format") == "ROW", f"mariadb: --binlog-format={actual.get('binlog-format')!r}, want ROW"
    assert actual.get("binlog-row-image") == "FULL", f"mariadb: --binlog-row-image={actual.get('binlog-row-image')!r}"
    assert "log-bin" in actual, "mariadb: --log-bin missing, no binlog for Debezium to read"
    assert_same(expected, actual, "mariadb command")
    assert the_published_port("mariadb").container_port == 3306, "mariadb: the image's server listens on 3306"


def test_mariadb_user_gets_the_global_grants_of_the_local_stack(local: LocalStack) -> None:
    mounts = [str(v) for v in service("mariadb").get("volumes") or [] if "/docker-entrypoint-initdb.d/" in str(v)]
    assert len(mounts) == 1, "mariadb: want one init SQL mounted into /docker-entrypoint-initdb.d/"
    source = mounts[0].split(":")[0]
    init_sql = (REPO / source).read_text()

    def statements(sql: str) -> set[str]:
        return {" ".join(s.split()).upper() for s in re.sub(r"--[^\n]*", "", sql).split(";") if s.strip()}

    provisioning = statements("".join(local.mariadb_sql))
    global_grants = {s for s in provisioning if s.startswith("GRANT ") and " ON *.* " in s}
    assert global_grants, "stack.py's mariadb provisioning has no GRANT ... ON *.* (test out of date?)"
    missing = global_grants - statements(init_sql)
    assert not missing, f"{source}: lacks the grants stack.py gives {local.env['MARIADB_USER']!r}: {sorted(missing)}"


def test_redis_settings(local: LocalStack) -> None:
    def options(argv: list[str]) -> dict[str, str]:
        return {argv[i][2:]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("--")}

    expected = options(local.spawned["redis"][0])
    for key in ("port", "bind", "dir"):  # the container's own network and paths
        expected.pop(key, None)
    actual = options(command("redis"))
    assert_same(expected, actual, "redis command")
    assert the_published_port("redis").container_port == int(actual.get("port", 6379)), "redis: wrong container port"


def test_kafka_settings(local: LocalStack) -> None:
    env, props = environment("kafka"), properties(local.files["kafka"])
    own_network = (
        "listeners",
        "advertised.listeners",
        "listener.security.protocol.map",
        "controller.quorum.voters",
        "log.dirs",
    )
    expected = {kafka_env_name(k): v for k, v in props.items() if k not in own_network}
    assert_same(expected, env, "kafka environment", [*map(kafka_env_name, own_network), "KAFKA_HEAP_OPTS"])
    heap, actual = heap_flags(local.spawned["kafka"][0]), heap_flags(env.get("KAFKA_HEAP_OPTS", "").split())
    assert actual == heap, f"kafka: KAFKA_HEAP_OPTS {sorted(actual)}, stack.env KAFKA_HEAP gives {sorted(heap)}"


def test_kafka_listeners_reach_the_host_and_the_containers(local: LocalStack) -> None:
    env, port = environment("kafka"), the_published_port("kafka")
    bound = listeners(env.get("KAFKA_LISTENERS", ""))
    advertised = listeners(env.get("KAFKA_ADVERTISED_LISTENERS", ""))
    protocol_map = env.get("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "")
    protocols = dict(item.split(":", 1) for item in protocol_map.split(",") if item)
    host = [name for name, (h, p) in advertised.items() if h in ("127.0.0.1", "localhost")]
    assert len(host) == 1, f"kafka: want one advertised listener for the host, got {advertised}"
    assert advertised[host[0]][1] == int(local.env["KAFKA_PORT"]), (
        f"kafka: host listener advertises port {advertised[host[0]][1]}, stack.env KAFKA_PORT={local.env['KAFKA_PORT']}"
    )
    assert bound.get(host[0], ("", -1))[1] == port.container_port, (
        f"kafka: published container port {port.container_port} is not the {host[0]} listener's {bound.get(host[0])}"
    )
    internal = [name for name, (h, p) in advertised.items() if h == "kafka"]
    assert len(internal) == 1, f"kafka: want one advertised listener on kafka:PORT for the containers, got {advertised}"
    assert bound.get(internal[0], ("", -1))[1] == advertised[internal[0]][1], f"kafka: {internal[0]} not bound"
    controller = env.get("KAFKA_CONTROLLER_LISTENER_NAMES", "")
    assert controller in bound and controller not in advertised, f"kafka: controller listener {controller!r} wrong"
    for name in bound:
        assert protocols.get(name) == "PLAINTEXT", f"kafka: listener {name} has protocol {protocols.get(name)!r}"
    node_id = properties(local.files["kafka"])["node.id"]
    voters = env.get("KAFKA_CONTROLLER_QUORUM_VOTERS", "")
    assert voters.startswith(f"{node_id}@") and voters.endswith(f":{bound[controller][1]}"), (
        f"kafka: KAFKA_CONTROLLER_QUORUM_VOTERS={voters!r}, want node {node_id} on the {controller} port"
    )
    # Connect, in another container, bootstraps from the internal listener.
    bootstrap = environment("connect").get("BOOTSTRAP_SERVERS")
    want = "{}:{}".format(*advertised[internal[0]])
    assert bootstrap == want, f"connect: BOOTSTRAP_SERVERS={bootstrap!r}, kafka advertises {want} to containers"


def test_connect_settings(local: LocalStack) -> None:
    env, props = environment("connect"), properties(local.files["connect"])
    for prop, topic in CONNECT_TOPICS.items():
        assert props.get(prop) == topic, f"stack.py: connect {prop}={props.get(prop)!r}, this test expects {topic!r}"
        assert env.get(connect_env_name(prop)) == topic, f"connect: {connect_env_name(prop)} is not {topic!r}"
    for side in ("KEY", "VALUE"):
        assert env.get(f"{side}_CONVERTER") == JSON_CONVERTER, f"connect: {side}_CONVERTER is not the JSON converter"
        # Connect's default (schemas on), as users run it: each connector sets its own converters.
        assert f"CONNECT_{side}_CONVERTER_SCHEMAS_ENABLE" not in env, f"connect: {side} converter schemas set"
    secrets = "config.providers.file.param.allowed.paths"  # the container's own path: checked below
    own_network = ("bootstrap.servers", "listeners", "rest.advertised.host.name", "plugin.path", secrets)
    expected = {connect_env_name(k): v for k, v in props.items() if k not in own_network}
    assert_same(expected, env, "connect environment", [*map(connect_env_name, own_network), "HEAP_OPTS"])
    if secrets in props:
        allowed = env.get(connect_env_name(secrets))
        mounts = [str(v).split(":")[1] for v in service("connect").get("volumes") or [] if ":" in str(v)]
        assert allowed in mounts, f"connect: {connect_env_name(secrets)}={allowed!r} is not a mounted directory"
    assert "CONNECT_OFFSET_FLUSH_INTERVAL_MS" not in env, (
        "connect: the image's entrypoint overwrites CONNECT_OFFSET_FLUSH_INTERVAL_MS; set OFFSET_FLUSH_INTERVAL_MS"
    )
    heap = heap_flags(local.spawned["connect"][0])
    actual_heap = heap_flags(env.get("HEAP_OPTS", "").split())
    assert actual_heap == heap, f"connect: HEAP_OPTS {sorted(actual_heap)}, stack.env CONNECT_HEAP gives {sorted(heap)}"
    rest = listeners(env.get("CONNECT_LISTENERS", "http://:8083"))
    target = the_published_port("connect").container_port
    assert [port for _, port in rest.values()] == [target], f"connect: REST listens on {rest}, published port {target}"


def test_elasticsearch_settings(local: LocalStack) -> None:
    env = environment("elasticsearch")
    argv, spawn_env = local.spawned["elasticsearch"]
    expected = pairs_after("-E", argv)
    own_network = ("http.port", "transport.port", "network.host", "path.data", "path.logs")
    for key in own_network:
        expected.pop(key, None)
    assert expected.get("discovery.type") == "single-node", "stack.py: elasticsearch is no longer single-node?"
    assert expected.get("xpack.security.enabled") == "false", "stack.py: elasticsearch security is no longer off?"
    assert_same(expected, env, "elasticsearch environment", [*own_network, "ES_JAVA_OPTS"])
    heap, actual = heap_flags(spawn_env["ES_JAVA_OPTS"].split()), heap_flags(env.get("ES_JAVA_OPTS", "").split())
    assert actual == heap, f"elasticsearch: ES_JAVA_OPTS {sorted(actual)}, stack.env ES_HEAP gives {sorted(heap)}"
    target = the_published_port("elasticsearch").container_port
    assert target == int(env.get("http.port", 9200)), f"elasticsearch: publishes container port {target}, not HTTP's"


def dash_flags(argv: list[str]) -> dict[str, str | None]:
    """SeaweedFS's `-name=value` and bare `-name` (-> None) flags."""
    pairs = (arg[1:].partition("=") for arg in argv if arg.startswith("-"))
    return {name: value if sign else None for name, sign, value in pairs}


def test_seaweedfs_settings(local: LocalStack) -> None:
    argv, spawn_env = local.spawned["seaweedfs"]
    assert "mini" in argv, f"stack.py: seaweedfs runs {argv[:3]}, not `weed mini` (test out of date?)"
    expected = dash_flags(argv[argv.index("mini") + 1 :])
    own = ("dir", "ip", "ip.bind", "s3.port", "master.port", "volume.port", "filer.port", "admin.port",
           "filer.localSocket", "s3.localSocket")  # fmt: skip
    for key in own:  # the container's own network and paths
        expected.pop(key, None)
    assert expected.get("bucket") == local.env["S3_BUCKET"], "stack.py: seaweedfs no longer makes the bucket?"
    assert expected.get("master.telemetry") == "false", "stack.py: seaweedfs sends usage statistics?"
    args = command("seaweedfs")
    assert args[:1] == ["mini"], f"seaweedfs: command {args[:1]}, want `mini` (the image's entrypoint adds -dir=/data)"
    actual = dash_flags(args[1:])
    assert_same(expected, actual, "seaweedfs command", own)
    # The S3 key pair and the Go memory limit, as stack.py hands them over.
    assert_same(spawn_env, environment("seaweedfs"), "seaweedfs environment")
    target = the_published_port("seaweedfs").container_port
    assert target == int(actual.get("s3.port") or 8333), f"seaweedfs: publishes container port {target}, not S3's"
    check = " ".join(service("seaweedfs").get("healthcheck", {}).get("test") or [])
    assert f"/buckets/{local.env['S3_BUCKET']}/" in check, "seaweedfs: its health check does not wait for the bucket"
