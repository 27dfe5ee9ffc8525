"""cdcsync: change-data-capture synchronisation.

The source database is the leader; Elasticsearch, Redis and Delta Lake are
followers that replay its change log (Debezium topics in Kafka) in commit
order. Parts, by folder: ``connectors/`` (capture), ``sync/`` (followers),
``snapshot/`` (bootstrap), and this core (config, errors, CLI).
"""

__version__ = "0.1.0"
