"""Documents under a writer and kill -9: a shop's tables at ~500 changes/s into document followers of
Elasticsearch and Redis under `cdcsync run`; the daemon killed and restarted, then Elasticsearch; after the writes
stop, `cdcsync verify` finds every document equal to the one SQL builds from the source.

Every transaction touches every table: lines inserted, updated, moved to another order and deleted; orders moved
to another customer, their keys updated (lines and tags follow by ON UPDATE CASCADE) and deleted; products and
customers renamed (fan-out to every document holding them), deleted and made again; the join table's rows; and
one hot order that grows to 200 lines. In ``make chaos`` (about four minutes); ``make test`` runs the same
changes without the faults in tests/integration/test_documents.py.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from cdcsync.connectors.apply import apply
from tests.chaos.daemon import daemon_config, start_daemon, verify_until_clean, wait_for_batches
from tests.integration.test_documents import documents, shop
from tests.support import ENV, drop_capture, execute, source_dict, stack, uid, wait_streaming

RATE = int(os.environ.get("CDCSYNC_CHAOS_DOCUMENT_RATE", "500"))  # changes/s
HOT = 9  # the order that grows to 200 lines


class ShopWriter:
    """Transactions of about ten changes over every table of the shop, at ``RATE`` changes/s."""

    def __init__(self, t: dict[str, str]) -> None:
        self.t = t
        self.rnd = random.Random(7)
        self.stop = threading.Event()
        self.changes = 0
        self.next_order = 1000
        self.next_line = 1000
        self.hot_lines = 3
        self.failed: list[str] = []  # a transaction that kept failing after the database came back
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _statements(self) -> list[str]:
        t, rnd = self.t, self.rnd
        self.next_order += 1
        new, other = self.next_order, rnd.randint(1, 20)
        self.next_line += 1
        out = [
            f"INSERT INTO {t['orders']} (id, customer_id, status) VALUES ({new}, {rnd.randint(1, 7)}, 'new')",
            f"INSERT INTO {t['lines']} VALUES ({new}, 1, 'p{rnd.randint(1, 6)}', 1), ({new}, 2, 'p1', 2)",
            f"INSERT INTO {t['order_tags']} VALUES ({new}, {rnd.randint(1, 5)})",
            f"UPDATE {t['lines']} SET qty = qty + 1 WHERE order_id = (SELECT max(order_id) FROM {t['lines']} "
            f"WHERE order_id < {new}) AND n = 1",
            # a line moved to another order (its key changes: the old one deleted, the new one inserted)
            f"UPDATE {t['lines']} SET order_id = (SELECT min(id) FROM {t['orders']} WHERE id > {other}), "
            f"n = {self.next_line + 100_000} WHERE ctid = (SELECT ctid FROM {t['lines']} WHERE order_id = {new - 3} "
            "AND n = 2 LIMIT 1)",
            f"UPDATE {t['orders']} SET customer_id = {rnd.randint(1, 7)} WHERE id = {new - 2}",
        ]
        what = rnd.random()
        if what < 0.15:  # a parent's key updated, its children following
            out.append(f"UPDATE {t['orders']} SET id = id + 100000 WHERE id = {new - 5}")
        elif what < 0.3:
            out.append(f"DELETE FROM {t['orders']} WHERE id = {new - 4}")  # cascades to its lines and tags
        elif what < 0.45:
            out.append(
                f"UPDATE {t['products']} SET title = 'title {rnd.random():.4f}' WHERE sku = 'p{rnd.randint(1, 5)}'"
            )
        elif what < 0.55:
            sku = f"p{rnd.randint(1, 6)}"
            out += [f"DELETE FROM {t['products']} WHERE sku = '{sku}'",
                    f"INSERT INTO {t['products']} VALUES ('{sku}', 'again', 1.5) ON CONFLICT DO NOTHING"]  # fmt: skip
        elif what < 0.65:
            c = rnd.randint(1, 7)
            out += [f"DELETE FROM {t['customers']} WHERE id = {c}" if rnd.random() < 0.3 else
                    f"INSERT INTO {t['customers']} VALUES ({c}, 'c {rnd.random():.4f}', 'new') ON CONFLICT (id) DO "
                    "UPDATE SET name = excluded.name"]  # fmt: skip
        elif what < 0.75:
            out.append(f"UPDATE {t['tags']} SET label = 'label {rnd.random():.4f}' WHERE id = {rnd.randint(1, 4)}")
        elif what < 0.85:
            out.append(f"DELETE FROM {t['order_tags']} WHERE order_id = {new - 1}")
        if self.hot_lines < 200:
            self.hot_lines += 1
            out.append(f"INSERT INTO {t['lines']} VALUES ({HOT}, {self.hot_lines + 1000}, 'p2', 1)")
        else:
            out.append(
                f"UPDATE {t['lines']} SET qty = qty + 1 WHERE order_id = {HOT} AND n = {rnd.randint(1001, 1200)}"
            )
        return out

    def _loop(self) -> None:
        per_s = max(RATE / 10, 1)  # about ten changes a transaction
        while not self.stop.is_set():
            started = time.monotonic()
            statements = self._statements()
            for _attempt in range(120):
                try:
                    execute("postgres", *statements)
                    self.changes += len(statements)
                    break
                except Exception as err:  # the database is being restarted: the same transaction again
                    if self.stop.is_set():
                        return
                    last = f"{err}: {statements}"
                    time.sleep(0.5)
            else:
                self.failed.append(last)
                return
            time.sleep(max(0.0, 1 / per_s - (time.monotonic() - started)))


@pytest.mark.long
def test_documents_converge_after_the_daemon_and_elasticsearch_are_killed_under_writes(tmp_path: Path) -> None:
    tag = f"d{uid()}"
    ddl, t = shop(tag)
    execute("postgres", *ddl)
    docs = documents(t)
    sources = [source_dict("postgres", f"{tag}_pg", [f"public.{name}" for name in t.values()])]
    followers = [
        {"name": "search", "kind": "elasticsearch", "url": f"http://127.0.0.1:{ENV['ES_PORT']}", "prefix": f"{tag}-",
         "dead_letter_topic": f"dlq.{tag}.search", "documents": docs},
        {"name": "cache", "kind": "redis", "url": f"redis://127.0.0.1:{ENV['REDIS_PORT']}/0", "prefix": tag,
         "dead_letter_topic": f"dlq.{tag}.cache", "documents": {"orders": docs["orders"]}},
    ]  # fmt: skip
    _, config_path, config = daemon_config(tmp_path, sources, followers)
    log, daemon = tmp_path / "run.log", None
    writer = ShopWriter(t)
    try:
        apply(config)
        wait_streaming(config)
        daemon = start_daemon(config_path, log)
        wait_for_batches(log, ("search", "cache"), within_s=300)
        writer.thread.start()
        time.sleep(20)
        os.killpg(daemon.pid, signal.SIGKILL)  # kill -9 of the daemon mid-run, and a new one
        daemon.wait(30)
        time.sleep(2)
        daemon = start_daemon(config_path, log)
        time.sleep(20)
        assert stack.main(["kill", "elasticsearch"]) == 0  # kill -9 of Elasticsearch under the writes
        time.sleep(10)
        assert stack.main(["up", "elasticsearch"]) == 0
        time.sleep(15)
        writer.stop.set()
        writer.thread.join(120)
        assert not writer.failed and writer.changes > RATE * 30, (writer.changes, writer.failed)
        done = verify_until_clean(config_path, within_s=420)
        text = log.read_text(errors="replace")
        assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-2000:], text[-3000:])
        assert daemon.poll() is None, text[-3000:]
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(150) == 0, text[-3000:]
        daemon = None
    finally:
        writer.stop.set()
        if daemon is not None:
            os.killpg(daemon.pid, signal.SIGKILL)
        stack.main(["up"])
        drop_capture(config)
        from tests.integration.followers import drop_stores

        drop_stores(config, tag)
        for name in ("order_tags", "lines", "orders", "tags", "products", "customers", "tick"):
            execute("postgres", f"DROP TABLE IF EXISTS {t[name]}")
