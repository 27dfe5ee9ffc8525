"""Snapshot bootstrap, aligned with exact per-partition offsets (ARCHITECTURE.md section 3).

``bootstrap`` builds a new follower's store from the compacted topics and
records where its stream starts. Still to come: ``--from source`` (a
consistent read of the database mapped to offsets) and ``reindex``.
"""
