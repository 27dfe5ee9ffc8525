"""``cdcsync verify``: each store compared with its source, in bounded memory (docs/followers.md, "Verify").

- ``compare``: a follower's pass, table by table (``verify_follower``), and its report;
- ``sides``: each side's rows as ids and digests of their stored form; ``process``: the source's side in a
  process of its own, for a table too large to read beside the store's;
- ``ranges``: range checksums, computed where each side is stored (the source's SQL is its kind's);
- ``spill``: the ids that differ, kept on disk past a bound; ``recheck``: rows that moved during a pass,
  read again; ``report``: what a pass found;
- ``background``: the daemon's paced passes, with their metrics.
"""
