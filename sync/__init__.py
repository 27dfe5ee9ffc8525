"""Followers: PySpark streaming queries that apply the change log to Elasticsearch, Redis and Delta Lake.

Where things are:

- ``daemon``: ``cdcsync run``'s followers under one ``supervisor``, with its
  background rounds, health and signals; ``stream`` starts one follower's
  query, ``build`` assembles its ``Follower`` from the config;
- ``follower``: one batch from Kafka records to a sink (parse, dead letters,
  last per key, map, write); ``executors`` runs it on Spark's workers for the
  sinks whose writes are order-free, ``shipped`` hands them the config and its
  secrets, ``fork_server`` forks those workers warm;
- ``mapping``, ``values``, ``far_time``: a change to a sink ``Row``;
  ``catalog`` and ``shape``: the tables' columns and their changes;
  ``reindex_needed``: tables only a reindex from the source can repair;
- ``sink`` is the contract every sink keeps, ``sinks/`` holds one module per
  store and the registry of kinds;
- ``position``, ``lag``, ``batching``, ``dead_letters``, ``verify``: where a
  follower stands in the log, how far behind it is, how large its batches
  are, where its poison records go, what ``verify`` compares.

The versions of changes come from ``cdcsync.events`` and
``cdcsync.resolvers``; the state directory from ``cdcsync.state``.
"""
