"""What each local component is configured with: its config files, flags and provisioning SQL.

Pure functions of ``stack.env``'s values and the state directory's paths;
they start nothing and write nothing. ``stack.py`` owns the processes (start,
wait, stop, pid files) and calls these for what to write and run.
``docker-compose.yml`` must say the same (``tests/unit/test_compose.py``).
"""

from __future__ import annotations

import base64
from pathlib import Path

Env = dict[str, str]


def kafka_cluster_id(raw: bytes) -> str:
    """The id ``kafka-storage format`` gets for a new cluster: ``raw`` (16 random bytes) in URL-safe base64.

    Never with a leading ``-``: the storage tool's argument parser takes such an
    id for an option and the format fails (``--cluster-id: expected one
    argument``), one fresh machine in 64. Kafka's own random ids avoid it too.
    """
    text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return "A" + text[1:] if text.startswith("-") else text


def postgresql_conf(env: Env, run: Path) -> str:
    """Appended to ``postgresql.conf`` after ``initdb``: logical decoding for Debezium, loopback only."""
    return (
        "\n# cdcsync local stack\n"
        f"port = {env['PG_PORT']}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{run}'\n"
        "wal_level = logical\nmax_wal_senders = 20\nmax_replication_slots = 20\n"
        "shared_buffers = 128MB\nmax_connections = 100\n"
    )


def postgres_provisioning(env: Env) -> str:
    """A psql script: the capture role (with REPLICATION) and its database, when missing."""
    user, password, db = env["PG_USER"], env["PG_PASSWORD"], env["PG_DATABASE"]
    return (
        f"SELECT 'CREATE ROLE {user} LOGIN REPLICATION CREATEDB PASSWORD ''{password}''' "
        f"WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{user}') \\gexec\n"
        f"SELECT 'CREATE DATABASE {db} OWNER {user}' "
        f"WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '{db}') \\gexec\n"
    )


def mariadb_flags(env: Env, data: Path, run: Path) -> list[str]:
    """``mariadbd``'s flags: a row-based binlog with full images and GTIDs, what Debezium reads."""
    return [
        "--no-defaults", f"--datadir={data}",
        f"--port={env['MARIADB_PORT']}", "--bind-address=127.0.0.1", f"--socket={run / 'mariadb.sock'}",
        f"--pid-file={run / 'mariadbd.pid'}", "--log-bin=mariadb-bin", "--binlog-format=ROW",
        "--binlog-row-image=FULL", "--server-id=1", "--gtid-domain-id=0", "--gtid-strict-mode=1", "--log-slave-updates",
        "--innodb-buffer-pool-size=128M", "--expire-logs-days=7", "--skip-name-resolve",
        "--character-set-server=utf8mb4", "--collation-server=utf8mb4_unicode_ci",
    ]  # fmt: skip


def mariadb_provisioning(env: Env) -> str:
    """SQL run as root once the server answers: the capture user, its grants and database (idempotent)."""
    user, password, db = env["MARIADB_USER"], env["MARIADB_PASSWORD"], env["MARIADB_DATABASE"]
    return (
        f"CREATE DATABASE IF NOT EXISTS {db} CHARACTER SET utf8mb4;"
        f"CREATE USER IF NOT EXISTS '{user}'@'%' IDENTIFIED BY '{password}';"
        f"GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR, LOCK TABLES ON *.* TO '{user}'@'%';"
        f"GRANT ALL PRIVILEGES ON {db}.* TO '{user}'@'%';"
        f"GRANT CREATE, DROP, ALTER, INSERT, UPDATE, DELETE, INDEX ON *.* TO '{user}'@'%';"
    )


def redis_flags(env: Env, data: Path) -> list[str]:
    """``redis-server``'s flags: append-only file, no RDB snapshots, in the foreground."""
    return ["--port", env["REDIS_PORT"], "--bind", "127.0.0.1", "--dir", str(data), "--appendonly", "yes",
            "--save", "", "--daemonize", "no", "--logfile", ""]  # fmt: skip


def log4j_properties() -> str:
    """Kafka's and Connect's logging: warnings from Kafka itself, Debezium's and the worker's INFO lines."""
    return (
        "status = warn\n"
        "appender.out.type = Console\nappender.out.name = OUT\n"
        "appender.out.layout.type = PatternLayout\nappender.out.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = INFO\nrootLogger.appenderRef.out.ref = OUT\n"
        "logger.kafka.name = kafka\nlogger.kafka.level = WARN\n"
        "logger.kafkaorg.name = org.apache.kafka\nlogger.kafkaorg.level = WARN\n"
        "logger.connect.name = org.apache.kafka.connect.runtime.Worker\nlogger.connect.level = INFO\n"
        "logger.debezium.name = io.debezium\nlogger.debezium.level = INFO\n"
    )


def java_flags(heap: str, log4j: Path) -> list[str]:
    """The JVM flags of Kafka and Connect: a fixed small heap, G1 with short pauses."""
    log = f"-Dlog4j2.configurationFile={log4j}"
    return [f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", log]


def kafka_properties(env: Env, data: Path) -> str:
    """A single KRaft node, broker and controller, with the log cleaner on (the topics are compacted)."""
    port, cport = env["KAFKA_PORT"], env["KAFKA_CONTROLLER_PORT"]
    return (
        "process.roles=broker,controller\nnode.id=1\n"
        f"controller.quorum.voters=1@127.0.0.1:{cport}\n"
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}\n"
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n"
        "controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
        f"log.dirs={data}\nnum.partitions=1\ndefault.replication.factor=1\n"
        "offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n"
        "transaction.state.log.min.isr=1\nshare.coordinator.state.topic.replication.factor=1\n"
        "share.coordinator.state.topic.min.isr=1\ngroup.initial.rebalance.delay.ms=0\n"
        "log.cleaner.enable=true\nauto.create.topics.enable=true\ndelete.topic.enable=true\n"
    )


def connect_properties(env: Env, plugins: Path, secrets: Path) -> str:
    """One distributed Connect worker with the Debezium plugins and a file config provider for secrets."""
    return (
        f"bootstrap.servers=127.0.0.1:{env['KAFKA_PORT']}\ngroup.id=cdcsync-connect\n"
        # Connect's own defaults (JSON with schemas on), as a user's worker has them: each connector sets
        # the converters it needs in its own config (connectors/templates).
        "key.converter=org.apache.kafka.connect.json.JsonConverter\n"
        "value.converter=org.apache.kafka.connect.json.JsonConverter\n"
        "config.storage.topic=_connect_configs\noffset.storage.topic=_connect_offsets\n"
        "status.storage.topic=_connect_status\nconfig.storage.replication.factor=1\n"
        "offset.storage.replication.factor=1\nstatus.storage.replication.factor=1\n"
        # Flush source offsets every second so a crash re-sends little.
        "offset.flush.interval.ms=1000\n"
        # One worker: reassign a dead worker's tasks at once instead of after 5 minutes.
        "scheduled.rebalance.max.delay.ms=0\n"
        # A Debezium task stopping while the broker is away took 5-9 s here; with Connect's 5 s default its
        # successor started while the old one still held the Postgres slot and its JMX names (docs/capture.md).
        "task.shutdown.graceful.timeout.ms=20000\n"
        f"listeners=http://127.0.0.1:{env['CONNECT_PORT']}\nrest.advertised.host.name=127.0.0.1\n"
        f"plugin.path={plugins}\ntopic.creation.enable=true\n"
        # Connector secrets are ${file:...} references resolved here, never stored in the connector config
        # (docs/secrets.md); the provider reads only the directory `cdcsync connectors apply` writes them to.
        "config.providers=file\n"
        "config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider\n"
        f"config.providers.file.param.allowed.paths={secrets}\n"
    )


def es_jvm_options() -> str:
    """Replaces the shipped ``jvm.options`` (its GC log path is relative to the install); ES_JAVA_OPTS sets the heap."""
    return "-XX:+UseG1GC\n-Djava.io.tmpdir=${ES_TMPDIR}\n-XX:+ExitOnOutOfMemoryError\n"


def es_settings(env: Env, data: Path, logs: Path) -> list[str]:
    """``bin/elasticsearch``'s ``-E`` settings: one node on loopback, security off, no disk watermarks."""
    settings = [
        f"http.port={env['ES_PORT']}", f"transport.port={env['ES_TRANSPORT_PORT']}",
        "network.host=127.0.0.1", "discovery.type=single-node", "cluster.name=cdcsync",
        "xpack.security.enabled=false", f"path.data={data}",
        f"path.logs={logs}", "action.destructive_requires_name=false",
        "cluster.routing.allocation.disk.threshold_enabled=false",
    ]  # fmt: skip
    return [arg for setting in settings for arg in ("-E", setting)]


def seaweedfs_flags(env: Env, data: Path, run: Path) -> list[str]:
    """``weed mini``'s flags: one process of master, volume, filer and S3 gateway on loopback, the bucket made.

    Every port is set (SeaweedFS's defaults, 8333, 8888, 9333, are common ones);
    the WebDAV server, the Iceberg and Lance catalogs and the admin UI are off.
    Usage statistics are not sent (``master.telemetry``).
    """
    ports = {
        "s3.port": env["S3_PORT"], "master.port": env["SEAWEEDFS_MASTER_PORT"],
        "volume.port": env["SEAWEEDFS_VOLUME_PORT"], "filer.port": env["SEAWEEDFS_FILER_PORT"],
        "admin.port": env["SEAWEEDFS_ADMIN_PORT"],
    }  # fmt: skip
    return [
        f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", *(f"-{key}={port}" for key, port in ports.items()),
        "-admin.port.legacy=0", "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
        "-master.telemetry=false", f"-filer.localSocket={run / 'seaweedfs-filer.sock'}",
        f"-s3.localSocket={run / 'seaweedfs-s3.sock'}", f"-bucket={env['S3_BUCKET']}",
    ]  # fmt: skip


def seaweedfs_environment(env: Env) -> dict[str, str]:
    """``weed mini``'s environment: the S3 gateway's one admin key pair, and the Go runtime's memory limit."""
    return {
        "AWS_ACCESS_KEY_ID": env["S3_ACCESS_KEY"],
        "AWS_SECRET_ACCESS_KEY": env["S3_SECRET_KEY"],
        "GOMEMLIMIT": env["SEAWEEDFS_MEMORY"],
    }
