"""A staged Delta table filled as a load: rows spooled as Parquet files, the newest per id written once at publish.

A staged table has no readers until it is published, so a bootstrap or a
reindex need not keep it merged batch by batch: a version-guarded MERGE per
batch reads the table it grows, and a bootstrap of 1M rows ran ~200 of them
(3,960 rows/s). Instead each batch's encoded rows go to a Parquet file of
their own in ``<staged table>__spool`` (``Spool.add``: pyarrow, no Spark job,
no commit), and ``load`` keeps the newest version of each id across all of
them and writes it into the staged table in one Spark write, the apply rule
applied once to the whole stretch: the highest version wins, a delete leaves
its marker, and with ``soft_delete`` the marker keeps the data of the id's
newest earlier change (as the MERGE's delete branch does). Then the sink's
publish copies the staged table to the live one, as before.

The spool lies beside the staged table, on the Delta tables' own storage: a
local directory, or an ``s3a://`` bucket that pyarrow's S3 client writes with
the settings Spark reads it with (``object_store``). Where pyarrow cannot
write as Spark does (``abfss://``, ``gs://``), ``spool_at`` finds no spool
and the staged table is MERGEd batch by batch instead (``DeltaSink.stage``).

Spool columns are named by the hex of their UTF-8 name (``c<hex>``): a Parquet
file takes any name, Spark's Parquet reader not every one (spaces, commas,
braces). Files written before a column was learned lack it; they are read
with ``mergeSchema`` and the column is null there, as a row written before
an ADD COLUMN. Each file records its columns' kinds in its schema metadata,
so a load knows the kind of a column another process learned.
"""

from __future__ import annotations

import itertools
import json
import os
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow.parquet as pq
from pyarrow import fs
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdcsync.sync.sinks import object_store
from cdcsync.sync.sinks.delta_values import arrow_table, spark_type

SUFFIX = "__spool"
KINDS = b"cdcsync.kinds"  # schema metadata: {column: kind} of a spool file's data columns
DROPPED = b"cdcsync.dropped"  # ... and the columns its process saw dropped (DROP COLUMN) since the stage
ID, VERSION, DELETED = "_cdcsync_id", "_cdcsync_version", "_cdcsync_deleted"
FILLS = {ID: "", VERSION: 0, DELETED: False}  # never used: a spooled row always has these


def column(name: str) -> str:
    """A data column's name in a spool file."""
    return "c" + name.encode().hex()


def name_of(spooled: str) -> str:
    return bytes.fromhex(spooled[1:]).decode()


class Spool:
    """The Parquet files of one staged table's rows in ``where``: a local path, or an ``s3a://`` URI.

    ``storage``: the Hadoop settings Spark reaches ``where`` with (``object_store``), which pyarrow writes with.
    """

    _counter = itertools.count()

    def __init__(self, where: str, storage: Mapping[str, str] | None = None) -> None:
        self.where = where.rstrip("/")
        self._fs, self._dir = object_store.filesystem(self.where, storage or {})
        self._fs.create_dir(self._dir, recursive=True)

    def add(
        self, meta: T.StructType, kinds: dict[str, str | None], dropped: set[str], data: list[tuple[Any, ...]]
    ) -> None:
        """Encoded rows (``meta``'s fields, then one value per ``kinds`` column) as one new file."""
        schema = T.StructType(meta.fields + [T.StructField(column(n), spark_type(k)) for n, k in kinds.items()])
        noted = {KINDS: json.dumps(kinds).encode(), DROPPED: json.dumps(sorted(dropped)).encode()}
        table = arrow_table(data, schema).replace_schema_metadata(noted)
        name = f"part-{os.getpid()}-{next(self._counter):06d}-{uuid.uuid4().hex[:8]}.parquet"
        pq.write_table(table, f"{self._dir}/{name}", filesystem=self._fs, compression="snappy")

    def files(self) -> list[str]:
        found = self._fs.get_file_info(fs.FileSelector(self._dir, allow_not_found=True))
        return sorted(f.path for f in found if f.type == fs.FileType.File and f.path.endswith(".parquet"))

    def kinds(self) -> tuple[dict[str, str | None], set[str]]:
        """Every data column any file holds, with its kind, and every column a writer saw dropped (footers only)."""
        kinds: dict[str, str | None] = {}
        dropped: set[str] = set()
        for path in self.files():
            metadata = pq.read_schema(path, filesystem=self._fs).metadata or {}
            kinds.update(json.loads(metadata.get(KINDS, b"{}")))
            dropped.update(json.loads(metadata.get(DROPPED, b"[]")))
        return kinds, dropped


def spool_at(where: str, storage: Mapping[str, str] | None = None) -> Spool | None:
    """A spool at ``where``, or None where pyarrow has no file system for its scheme (``abfss://``, ``gs://``)."""
    return Spool(where, storage) if object_store.served(where) else None


def newest(
    spark: SparkSession, where: str, meta: T.StructType, kinds: dict[str, str | None], soft_delete: bool
) -> DataFrame:
    """The newest row of each id in the spool at ``where``: ``meta``'s columns, then ``kinds``' columns by name.

    A column a file lacks is null in its rows. With ``soft_delete``, an id
    whose newest row is a delete keeps the data of its newest earlier row
    that is not one. ``meta``'s columns keep their nullability: a table
    overwritten with these rows has the schema a MERGEd one has. The rows come
    in ranges of ids, one per partition, each in id order: the files of a table
    written with them hold one range each, which a MERGE's key predicate prunes
    (docs/performance.md, "Delta: a MERGE that prunes by key").
    """
    # Ranges of ids, one per task: each file of the table then holds the ids of one range, in order.
    rows = spark.read.option("mergeSchema", "true").parquet(where).repartitionByRange(ID)
    present = set(rows.columns)

    def data(frame: DataFrame, name: str, kind: str | None) -> Column:
        spooled = column(name)
        return (frame[spooled] if spooled in present else F.lit(None)).cast(spark_type(kind))

    def header(frame: DataFrame) -> list[Column]:  # coalesced with a literal, Spark knows a column holds no null
        return [F.coalesce(frame[f.name], F.lit(FILLS[f.name])).alias(f.name) if not f.nullable else frame[f.name]
                for f in meta.fields]  # fmt: skip

    latest = Window.partitionBy(ID).orderBy(F.col(VERSION).desc())
    last = rows.withColumn("_cdcsync_n", F.row_number().over(latest)).where("_cdcsync_n = 1")
    if not soft_delete:
        return last.select(*header(last), *(data(last, n, k).alias(n) for n, k in kinds.items()))
    alive = rows.where(~F.col(DELETED))
    alive = alive.withColumn("_cdcsync_n", F.row_number().over(latest)).where("_cdcsync_n = 1")
    kept = alive.select(F.col(ID).alias("_cdcsync_alive"), *(data(alive, n, k).alias(f"a{column(n)}")
                                                            for n, k in kinds.items()))  # fmt: skip
    joined = last.join(kept, last[ID] == kept["_cdcsync_alive"], "left")
    return (
        joined.select(
            *header(last),
            *(
                F.when(last[DELETED], kept[f"a{column(n)}"]).otherwise(data(last, n, k)).alias(n)
                for n, k in kinds.items()
            ),
        )
        .repartitionByRange(ID)  # the join's output is partitioned by hash
        .sortWithinPartitions(ID)
    )
