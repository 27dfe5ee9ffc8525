"""What a source's table is called outside its database: its Kafka topic, its id in a connector config, its target.

A table may have any name its database accepts (spaces, dots, quotes, letters of any script); each place
that holds it has its own rules, and these functions are the one place that knows them (docs/types.md, "Names").
"""

from __future__ import annotations

import re

TOPIC_MAX = 249  # Kafka's longest topic name


def topic_name(*parts: str) -> str:
    """Debezium's topic name for ``parts`` joined by dots: each UTF-16 unit Kafka refuses becomes '_'.

    As Debezium's default topic naming strategy writes it (a name that differs is logged as a WARN by the
    connector, never an error), so a follower reads the topic capture writes.
    """
    name = ".".join(parts)
    units = name.encode("utf-16-le")
    out = []
    for i in range(0, len(units), 2):
        unit = int.from_bytes(units[i : i + 2], "little")
        out.append(chr(unit) if unit < 128 and (chr(unit).isalnum() or chr(unit) in "._-") else "_")
    return "".join(out)[:TOPIC_MAX]


def default_target(table: str) -> str:
    """A table's target when its mapping names none: its name in lower case, with what an Elasticsearch
    index, a Redis key or a Delta table path may not hold (spaces, unicode, quotes...) as '_'."""
    name = re.sub(r"[^a-z0-9_.-]", "_", table.lower()).lstrip("_.-")
    return name[:200] or "table"


def debezium_id(*parts: str) -> str:
    """A table as Debezium parses a table id in its config: a part that is not a plain name double-quoted."""
    return ".".join(
        part if re.fullmatch(r"\w+", part, re.ASCII) else '"' + part.replace('"', '""') + '"' for part in parts
    )
