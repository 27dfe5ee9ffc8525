"""Snapshot bootstrap, aligned with exact per-partition offsets (ARCHITECTURE.md section 3).

``bootstrap`` builds a new follower's store from the compacted topics
(``--from topics``) or from a consistent read of the database mapped to log
offsets (``source``, ``--from source``), and records where its stream starts
(``positions``). ``reindex`` rebuilds a follower's store beside the live one
and switches readers to it in one step.
"""
