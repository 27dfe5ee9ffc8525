"""Capture of MariaDB: Debezium's MariaDB connector over the row-based binlog with GTIDs."""

from __future__ import annotations

from cdcsync.sources.capture import Capture


class MariaDBCapture(Capture):
    connector_class = "io.debezium.connector.mariadb.MariaDbConnector"
    template = "mariadb"
