"""A sink class says which roles it plays (``sync.sink``): what the daemon asks of a store follows from that."""

from __future__ import annotations

from cdcsync.config import Config
from cdcsync.sync.marker_purge import MarkerPurge as Pass
from cdcsync.sync.sink import Digesting, MarkerPurge, Purged, Reader, Sink, Staging, Writer, declares
from cdcsync.sync.sinks import purges_markers
from cdcsync.sync.sinks.delta import DeltaSink
from cdcsync.sync.sinks.elasticsearch import ElasticsearchSink
from cdcsync.sync.sinks.redis import RedisSink

CONFIG = Config.model_validate(
    {
        "followers": [
            {"name": "search", "kind": "elasticsearch", "url": "http://127.0.0.1:9200"},
            {"name": "cache", "kind": "redis", "url": "redis://127.0.0.1:6379/0"},
            {"name": "lake", "kind": "delta"},
        ]
    }
)


def test_every_sink_plays_the_three_roles_of_a_sink_and_the_extra_ones_it_declares() -> None:
    for sink in (ElasticsearchSink, RedisSink, DeltaSink):
        assert all(declares(sink, role) for role in (Sink, Writer, Reader, Staging)), sink
    assert [s for s in (ElasticsearchSink, RedisSink, DeltaSink) if declares(s, MarkerPurge)] == [ElasticsearchSink]
    assert [s for s in (ElasticsearchSink, RedisSink, DeltaSink) if declares(s, Digesting)] == [DeltaSink]


def test_a_member_of_the_same_name_is_no_declaration() -> None:
    class Lookalike:
        def purge_markers(self, target: str, horizon_s: float, now: float | None = None) -> Purged:
            return Purged()

    assert not declares(Lookalike, MarkerPurge)


def test_the_daemon_purges_markers_of_the_followers_whose_sink_declares_it() -> None:
    assert [f.name for f in CONFIG.followers if purges_markers(f)] == ["search"]
    assert [f.name for f in Pass(CONFIG, CONFIG.followers).followers] == ["search"]
