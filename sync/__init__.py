"""Followers: PySpark streaming queries that apply the change log to Elasticsearch, Redis and Delta Lake.

Not built yet: the change-event contract and the sinks arrive with the
"Followers" issue (ARCHITECTURE.md §2, §4).
"""
