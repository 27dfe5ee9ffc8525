"""Capture: Debezium connectors on Kafka Connect, declared in config, applied idempotently.

``templates/`` holds each connector kind's Debezium defaults as data;
``render`` fills them from a source's config; ``preflight`` checks the source
database and Connect before anything is registered; ``topics`` pre-creates the
compacted per-table topics; ``apply`` runs the whole sequence and ``client``
speaks Connect's REST API. ``remove`` takes a source's capture away again
(``connectors delete``, and ``apply --prune`` for the connectors ``owned``
finds whose source left the config).
"""
