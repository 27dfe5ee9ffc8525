"""Snapshot bootstrap, aligned with exact per-partition offsets (docs/snapshot-alignment.md).

``bootstrap`` builds a new follower's store from the compacted topics
(``--from topics``) or from a consistent read of the database mapped to log
offsets (``source``, ``--from source``, read by ``reads`` and
``table_copy``), and records where its stream starts. ``reindex`` builds a new
generation of a follower's store beside the live one and switches readers to
it in one step. Both replay the log with ``replay``, in several processes
(``parallel``) where the sink allows.
"""
