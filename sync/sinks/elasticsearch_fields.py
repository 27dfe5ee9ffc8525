"""The Elasticsearch sink's fields: each column type's field mapping, and the names no document may hold."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from cdcsync.errors import TableError
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.sinks.elasticsearch_markers import DELETED_AT_FIELD, DELETED_AT_MAPPING, DELETED_FIELD

# The fields cdcsync writes in every document itself (the row's version, and the delete marker's): no row may hold them.
VERSION_FIELD = "cdcsync_version"
# A row whose id is longer than Elasticsearch's _id takes (MAX_ID_BYTES) is stored under a digest of it (stored_id),
# with the whole id in this field: stored only, neither indexed nor in doc values (no length limit).
KEY_FIELD = "cdcsync_key"
KEY_MAPPING: dict[str, Any] = {"type": "keyword", "index": False, "doc_values": False}
OWN_FIELDS = (VERSION_FIELD, DELETED_FIELD, DELETED_AT_FIELD, KEY_FIELD)  # cdcsync.config.INDEX_OWN_FIELDS
MAX_ID_BYTES = 512  # longer: ES fails the WHOLE bulk request (action_request_validation_exception)
LONG_ID = "cdcsync-sha256:"  # the _id of a row whose id is longer: this and its id's SHA-256 in hex


def stored_id(doc_id: str) -> str:
    """The ``_id`` a row's id is stored under: itself, or when past ``MAX_ID_BYTES`` a digest of it (deterministic,
    so every write, delete, repair and reindex of that row finds the same document).

    A lone surrogate raises ``UnicodeEncodeError``: no JSON text holds one."""
    encoded = doc_id.encode()
    if len(encoded) <= MAX_ID_BYTES:
        return doc_id
    return LONG_ID + hashlib.sha256(encoded).hexdigest()


# Column type (sync.mapping.TYPES) -> field mapping. Types missing here stay dynamic.
# A decimal is a double (range queries, sorting, aggregations) with its exact digits in ``<field>.exact``
# (terms); ``_source`` keeps the exact text. scaled_float would be exact only up to 2^63 scaled units
# (DECIMAL(38,10) overflows it) and lives in a module the local distribution leaves out
# (docs/schema-changes.md, "Elasticsearch types"). ignore_malformed: Postgres' 'NaN' keeps its document.
DECIMAL_FIELD: dict[str, Any] = {
    "type": "double",
    "ignore_malformed": True,
    "fields": {"exact": {"type": "keyword"}},
}
JSON_FIELD: dict[str, Any] = {"type": "object", "enabled": False}
TEXT_FIELD: dict[str, Any] = {
    "type": "text",
    "fields": {"keyword": {"type": "keyword", "ignore_above": 256}},
}  # dynamic's
FIELD_TYPES: dict[str, dict[str, Any]] = {
    "decimal": DECIMAL_FIELD,
    "text": TEXT_FIELD,
    "pg_text": TEXT_FIELD,  # a tsquery, a pg_lsn, a composite value...: Postgres' text
    "geometric": TEXT_FIELD,
    # _source keeps a timestamp's microseconds; the index has millisecond precision. ignore_malformed: a year past
    # 9999 (Postgres reaches 294276 AD), which Elasticsearch's date cannot parse, keeps its document and its
    # exact text in _source, left out of the index like a float's NaN (docs/types.md).
    "date": {"type": "date", "ignore_malformed": True},
    "timestamp": {"type": "date", "ignore_malformed": True},
    "time": {"type": "keyword"},  # a time of day has no date to parse
    "duration": {"type": "keyword"},  # MariaDB's TIME, as it shows it: -01:00:00, 838:59:59.999999
    "uuid": {"type": "keyword"},
    "bits": {"type": "keyword"},  # '0101', as Postgres writes a bit string
    # A json column may hold an object in one row and a string, number, array or null in another: a dynamic
    # object refused every row whose shape differed from the first (a mapping conflict). Not parsed, any JSON
    # value is kept exactly in _source; its content is not searchable (docs/types.md).
    "json": JSON_FIELD,
    "point": JSON_FIELD,  # Debezium's {x, y, wkb, srid}; x and y need not be longitude and latitude
    "geometry": JSON_FIELD,
    "bytes": {"type": "binary"},
    "bool": {"type": "boolean"},
    "int": {"type": "long"},
    # NaN and the infinities have no JSON number: stored as text in _source ("NaN", "Infinity", "-Infinity"),
    # left out of the index (ignore_malformed), like a decimal's NaN.
    "float": {"type": "double", "ignore_malformed": True},
}

# Field names Elasticsearch refuses in a document (seen on 8.x): its metadata fields, and names whose dot-separated
# parts are empty or blank. A field "a.b" is the object path a -> b, so a table with columns "a" and "a.b" cannot
# be one index's document either.
METADATA_FIELDS = frozenset(
    {"_id", "_index", "_source", "_routing", "_version", "_seq_no", "_primary_term", "_ignored", "_ignored_source",
     "_field_names", "_nested_path", "_tier", "_data_stream_timestamp", "_feature"}
)  # fmt: skip


def refused_fields(table: str, fields: dict[str, str]) -> list[str]:
    """Why Elasticsearch would refuse every document of ``table``: ``fields`` maps each field to its column."""
    problems = []
    for name, column in fields.items():
        why = None
        if name in METADATA_FIELDS:
            why = "is one of Elasticsearch's metadata fields"
        elif any(not part.strip() for part in name.split(".")[: -1 if name.endswith(".") else None]):
            why = "has an empty or blank part between its dots, which Elasticsearch refuses"
        else:
            clash = next((other for other in fields if other.startswith(name + ".")), None)
            if clash is not None:
                why = f"is also the object holding field {clash!r} (Elasticsearch reads dots as a path)"
        if why:
            problems.append(
                f"table {table}: column {column!r} as field {name!r} {why}; give it another name for this "
                f"follower: mappings.'{table}'.rename: {{{column!r}: <name>}}"
            )
    return problems


def properties(mapping: TableMapping, own: dict[str, Any]) -> dict[str, Any]:
    """The index's explicit field mappings for ``mapping``'s columns, after the sink's ``own`` fields.

    A column Elasticsearch would refuse in every document is a ``TableError`` naming it and the rename to
    set: the table is held alone, its follower's other tables go on (``sync.held``).
    """
    fields = mapping.fields()
    problems = refused_fields(mapping.table, {name: column for column, (name, _) in fields.items()})
    if problems:
        fix = f"the renames named, in the follower's mappings.'{mapping.table}'.rename, then a restart of the follower"
        raise TableError(mapping.target, "; ".join(problems), fix)
    props = dict(own)
    for name, kind in fields.values():
        if kind in FIELD_TYPES:
            props[name] = FIELD_TYPES[kind]
    props.update(mapping.field_mappings)
    return props


def by_target(mappings: Sequence[TableMapping]) -> dict[str, dict[str, Any]]:
    """Each target's explicit field mappings: its tables' columns and cdcsync's own fields (``with_own_fields``)."""
    found: dict[str, dict[str, Any]] = defaultdict(dict)
    for mapping in mappings:  # several tables may feed one target
        found[mapping.target].update(with_own_fields(mapping))
    return found


def with_own_fields(mapping: TableMapping) -> dict[str, Any]:
    own = {VERSION_FIELD: {"type": "long"}, DELETED_FIELD: {"type": "boolean"}, KEY_FIELD: KEY_MAPPING}
    return properties(mapping, {**own, DELETED_AT_FIELD: DELETED_AT_MAPPING})
