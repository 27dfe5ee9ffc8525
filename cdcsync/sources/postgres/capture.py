"""Capture of Postgres: Debezium's Postgres connector over a slot and a publication (pgoutput)."""

from __future__ import annotations

from cdcsync.sources.capture import Capture


class PostgresCapture(Capture):
    connector_class = "io.debezium.connector.postgresql.PostgresConnector"
    template = "postgres"
