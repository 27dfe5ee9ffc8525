"""Snapshot bootstrap and reindex, aligned with exact per-partition offsets.

Not built yet: arrives with the "Snapshot bootstrapper" issue (ARCHITECTURE.md §3).
"""
