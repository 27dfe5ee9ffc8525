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
