"""``python -m cdcsync`` is the ``cdcsync`` command."""

from cdcsync.cli import main

main()
