"""cdcsync's Kafka clients: every Producer, Consumer and AdminClient is built here, so librdkafka logs through Python.

Without a ``logger``, librdkafka writes its lines
(``%3|…|FAIL|rdkafka#consumer-1| …: Connection refused``) to file descriptor 2
itself, past any logging configuration. Given one, confluent-kafka queues them
and hands them to the ``cdcsync.kafka`` logger, syslog levels mapped: 0-2
CRITICAL, 3 ERROR, 4 WARNING, 5-6 INFO, 7 DEBUG (librdkafka's ``debug``
property). They are handed over only by the calls that serve the client's
queue, in the calling thread:

- a consumer's ``poll()``, ``consume()`` and ``close()``;
- a producer's ``poll()`` and ``flush()``;
- an AdminClient's ``poll()`` alone, so ``admin`` serves them when its block ends.

A consumer kept for metadata alone (watermarks, topics) calls ``serve_logs``.
What is still queued when a client is destroyed is dropped, never printed.

The logger is added to a copy of the settings where the client is built:
``KafkaSettings.client_config()`` stays plain text, fit to ship to Spark tasks,
which build their clients here too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

LOG = logging.getLogger(__name__)


def consumer(conf: Mapping[str, Any]) -> Consumer:
    return Consumer({**conf, "logger": LOG})


def producer(conf: Mapping[str, Any]) -> Producer:
    return Producer({**conf, "logger": LOG})


@contextmanager
def admin(conf: Mapping[str, Any]) -> Iterator[AdminClient]:
    """An AdminClient for the block; the log lines it queued meanwhile are logged when the block ends."""
    client = AdminClient({**conf, "logger": LOG})
    try:
        yield client
    finally:
        serve_logs(client)


def serve_logs(client: Consumer | AdminClient) -> None:
    """Log what librdkafka queued for ``client``, without waiting.

    Only for a consumer with nothing assigned: its ``poll`` would return a record.
    """
    client.poll(0)
