"""The file ``spark-submit`` runs for cdcsync: ``spark-submit [spark options] deploy/spark/submit.py [cdcsync args]``.

``spark-submit`` takes a Python file, not a console script; this one is the
``cdcsync`` command. The master and every ``--conf`` come from
``spark-submit``: ``cdcsync.spark`` sees that it runs inside it and keeps
them (deploy/spark/README.md).
"""

from cdcsync.cli import main

main()
