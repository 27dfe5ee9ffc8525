"""Spark's Kafka source and Delta Lake, as pinned and installed, work together on this stack."""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import ENV, uid


def test_structured_stream_from_kafka_into_delta(tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    from cdcsync.spark import spark_session

    bootstrap = f"127.0.0.1:{ENV['KAFKA_PORT']}"
    topic = f"spark_smoke_{uid()}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(timeout=30)
    try:
        producer = Producer({"bootstrap.servers": bootstrap})
        sent = {i: {"id": i, "name": f"row {i}", "price": f"{i}.25"} for i in range(1, 201)}
        for i, row in sent.items():
            producer.produce(topic, key=json.dumps({"id": i}), value=json.dumps(row))
        assert producer.flush(30) == 0

        spark = spark_session("cdcsync-smoke")
        stream = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .select(
                F.col("key").cast("string").alias("key"),
                F.col("value").cast("string").alias("value"),
                "partition",
                "offset",
            )
        )
        table = tmp_path / "delta_table"
        query = (
            stream.writeStream.format("delta")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start(str(table))
        )
        query.awaitTermination(180)
        assert query.exception() is None

        rows = spark.read.format("delta").load(str(table)).collect()
        got = {json.loads(r["key"])["id"]: json.loads(r["value"]) for r in rows}
        assert got == sent
        assert len(rows) == len(sent)
        # The stream's commit, then (auto compaction, cdcsync.spark) an OPTIMIZE of a new table's first files.
        operations = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()]
        assert "STREAMING UPDATE" in operations, operations
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)
