"""The local stack's pure config functions (deploy/local/configs.py) that test_compose does not cover."""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path
from types import ModuleType

CONFIGS = Path(__file__).resolve().parents[2] / "deploy" / "local" / "configs.py"


def _configs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("local_configs", CONFIGS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_kafka_cluster_id_never_starts_with_a_dash() -> None:
    # 0xf8 encodes to '-' first: the storage tool read such an id as an option and `make up` failed.
    configs = _configs()
    raw = bytes([0xF8]) + bytes(range(15))
    assert base64.urlsafe_b64encode(raw).decode().startswith("-")
    cluster_id = configs.kafka_cluster_id(raw)
    assert not cluster_id.startswith("-")
    assert len(cluster_id) == 22 and len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_a_kafka_cluster_id_keeps_other_ids_as_they_are() -> None:
    raw = bytes(range(16))
    assert _configs().kafka_cluster_id(raw) == base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_seaweedfs_listens_on_loopback_ports_that_collide_with_no_other_of_the_stack() -> None:
    """Each SeaweedFS server listens on its stack.env port and, by SeaweedFS's rule, on that port + 10000 (gRPC)."""
    env = dict(
        line.split("=", 1)
        for line in (CONFIGS.parent / "stack.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    flags = _configs().seaweedfs_flags(env, Path("/data"), Path("/run"))
    ports = {int(arg.split("=")[1]) for arg in flags if arg.split("=")[0].endswith(".port")}
    keys = ("S3_PORT", "SEAWEEDFS_MASTER_PORT", "SEAWEEDFS_VOLUME_PORT", "SEAWEEDFS_FILER_PORT", "SEAWEEDFS_ADMIN_PORT")
    assert ports == {int(env[k]) for k in keys}, flags
    others = {int(v) for k, v in env.items() if k.endswith("_PORT") and k not in keys}
    listening = ports | {p + 10_000 for p in ports}
    assert len(listening) == 2 * len(ports) and not listening & others, sorted(listening & others)
    assert max(listening) < 32768, "at or above Linux's ephemeral port range: an outgoing connection may take it"
    assert "-ip.bind=127.0.0.1" in flags and "-master.telemetry=false" in flags
