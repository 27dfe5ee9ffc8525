"""docs/config.md and cdcsync.schema.json are what the config's models give: a new setting is documented."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cdcsync.config import MASK, Config
from cdcsync.config import reference as config_reference

REGENERATE = "run `python -m cdcsync.config.reference` and commit the result"


def test_the_reference_and_the_schema_in_the_repository_are_the_generated_ones() -> None:
    assert config_reference.REFERENCE.read_text() == config_reference.reference(), REGENERATE
    assert config_reference.SCHEMA.read_text() == config_reference.schema_text(), REGENERATE


def test_every_setting_says_what_it_does() -> None:
    undocumented = [
        f"{path}.{name}" if path else name
        for path, model in config_reference.sections(Config, "")
        for name, field in model.model_fields.items()
        if name not in config_reference.HIDDEN and not field.description
    ]
    assert undocumented == []


def test_the_schema_takes_a_table_as_text_or_as_its_two_names() -> None:
    schema = config_reference.schema()
    tables = schema["$defs"]["SourceConfig"]["properties"]["tables"]["items"]["anyOf"]
    assert tables[0]["type"] == "string" and tables[1] == {"$ref": "#/$defs/TableRef"}
    assert "origin" not in schema["properties"] and schema["title"] == "cdcsync config"


def test_the_config_command_prints_the_file_as_read_with_secrets_masked_and_refuses_a_bad_one(tmp_path: Path) -> None:
    def cdcsync(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CDCSYNC_")}
        return subprocess.run([sys.executable, "-m", "cdcsync", *args], capture_output=True, text=True, env=env)

    good = cdcsync("-c", str(config_reference.ROOT / "cdcsync.yaml"), "config", "--json")
    assert good.returncode == 0, good.stderr
    effective = json.loads(good.stdout)
    assert effective["sources"][0]["password"] == MASK and effective["followers"][0]["verify"]["rows_per_s"] == 800
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [{name: pg, kind: postgres, port: 0}]\n")
    refused = cdcsync("-c", str(bad), "config")
    assert refused.returncode == 2 and "sources[0].port" in refused.stderr
    schema = cdcsync("config", "--schema")
    assert schema.returncode == 0 and json.loads(schema.stdout) == config_reference.schema()
