"""MariaDB's side of range checksums: its text forms, and sums in ``DECIMAL``."""

from __future__ import annotations

from typing import ClassVar

from cdcsync.sources.base import SourceSettings, TableName
from cdcsync.sources.checksums import Catalog, Checksums
from cdcsync.sources.mariadb.connection import connect


class MariaDBChecksums(Checksums):
    # MariaDB: no TIMESTAMP (read in the session's time zone) and no BIGINT UNSIGNED (a decimal kind). A date
    # MariaDB cannot count from 1970 (the zero date) is written as its text, which no Delta value matches.
    forms: ClassVar[dict[tuple[str, str], str]] = {
        **{(t, "int"): "CAST({c} AS CHAR)" for t in ("tinyint", "smallint", "mediumint", "int", "bigint", "year")},
        ("tinyint", "bool"): "CASE WHEN {c} <> 0 THEN 'true' WHEN {c} = 0 THEN 'false' END",  # a null stays null
        **{(t, "text"): "CONVERT({c} USING utf8mb4)" for t in ("char", "varchar", "tinytext", "text", "mediumtext")},
        ("longtext", "text"): "CONVERT({c} USING utf8mb4)",
        ("datetime", "timestamp"): "COALESCE(CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {c}) AS CHAR),"
        " CONCAT('?', CAST({c} AS CHAR)))",
        ("date", "date"): "COALESCE(CAST(DATEDIFF({c}, '1970-01-01') AS CHAR), CONCAT('?', CAST({c} AS CHAR)))",
    }
    pieces = ("COALESCE(CONCAT(OCTET_LENGTH({t}), ':', {t}), '~')", "COALESCE(CONCAT({t}, ','), '~')")
    key_types = frozenset(("tinyint", "smallint", "mediumint", "int", "bigint"))

    def as_bigint(self, key: str) -> str:
        return f"CAST({key} AS SIGNED)"

    def integer_division(self) -> str:
        return "DIV"

    def one_of(self, expression: str, numbers: str) -> str:
        return f"{expression} IN ({numbers})"

    def concat(self, parts: list[str]) -> str:
        return f"CONCAT({', '.join(parts)})"

    def catalog(self, source: SourceSettings, table: TableName, key: str) -> Catalog | None:
        name = ".".join("`" + part.replace("`", "``") + "`" for part in (table.namespace, table.table))
        column = "`" + key.replace("`", "``") + "`"
        conn = connect(source)
        with conn, conn.cursor() as cur:
            cur.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = %s",
                (table.namespace, table.table),
            )
            types = list(cur.fetchall())
            cur.execute(f"SELECT MIN({column}), MAX({column}) FROM {name}")
            low, high = cur.fetchone() or (None, None)
            cur.execute(
                "SELECT table_rows FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                (table.namespace, table.table),
            )
            estimated = cur.fetchone()
        if low is None or high is None:
            low = high = 0
        found = {str(c): str(kind).lower() for c, kind in types}
        return found, int(low), int(high), int(estimated[0] or 0) if estimated else 0

    def sums_query(self, bucket: str, text: str, table: str) -> str:
        return (
            f"SELECT b, COUNT(*), SUM(CAST(CONV(SUBSTR(h, 1, 15), 16, 10) AS UNSIGNED)),"
            f" SUM(CAST(CONV(SUBSTR(h, 16, 15), 16, 10) AS UNSIGNED))"
            f" FROM (SELECT {bucket} AS b, MD5(CONVERT({text} USING utf8mb4)) AS h FROM {table}) r GROUP BY b"
        )
