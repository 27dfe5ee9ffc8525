"""One module per derived store, each implementing ``cdcsync.sync.sink.Sink``."""
