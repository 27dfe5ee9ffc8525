"""Every Kafka client cdcsync makes carries ``kafka.properties`` (SASL, SSL) and logs through Python.

A client built from ``bootstrap_servers`` only reaches a plaintext broker and
fails against a secured one, on whichever path happens to use it (the
dead-letter producer, the lag reader, the position check, ...). The clients
take ``KafkaSettings.client_config()``; this test finds any that does not.
A client built outside ``cdcsync.kafka`` has no logger, and librdkafka then
writes its lines to stderr itself.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cdcsync", "connectors", "sync", "snapshot")
BARE = re.compile(r"""["']bootstrap\.servers["']\s*:""")
BUILT = re.compile(r"\b(Consumer|Producer|AdminClient)\(")


def test_no_client_is_built_from_the_bootstrap_servers_alone() -> None:
    bare = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        # cdcsync/config/deployment.py is where client_config() builds them
        if BARE.search(line) and path.relative_to(ROOT).as_posix() != "cdcsync/config/deployment.py"
    ]
    assert not bare, f"Kafka clients without kafka.properties: {bare}"


def test_every_client_is_built_by_cdcsync_kafka() -> None:
    built = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if BUILT.search(line) and path != ROOT / "cdcsync" / "kafka.py"
    ]
    assert not built, f"Kafka clients built without cdcsync.kafka (no logger): {built}"


def test_client_config_carries_the_properties() -> None:
    from cdcsync.config import KafkaSettings

    settings = KafkaSettings(bootstrap_servers="k:9093", properties={"security.protocol": "sasl_ssl"})
    assert settings.client_config() == {
        "bootstrap.servers": "k:9093",
        "enable.metrics.push": "false",  # CLIENT_DEFAULTS
        "security.protocol": "sasl_ssl",
    }


def test_properties_override_the_client_defaults() -> None:
    from cdcsync.config import KafkaSettings

    settings = KafkaSettings(properties={"enable.metrics.push": "true"})
    assert settings.client_config()["enable.metrics.push"] == "true"
