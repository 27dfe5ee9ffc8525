"""Documents: nested documents of related tables, followed from the log (docs/documents.md).

- ``tree``: a document's config checked against its tables' catalogs (``Tree``, ``Node``, ``Link``);
- ``mirror``: the follower's state on disk: each table's rows the documents use, and the roots to rebuild;
- ``engine``: changes applied to the mirror, the roots they touch, documents rebuilt with their versions;
- ``follower``: ``DocumentFollower``, a ``Follower`` whose batches go through the engine to its sink;
- ``build``: the follower built from its config.
"""
