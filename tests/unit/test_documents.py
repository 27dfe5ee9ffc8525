"""Documents from changes, on plain data: the tree checked, the mirror and engine against a reference join.

The reference is the join done the obvious way over the final tables (``expected``); the engine gets the same
changes cut into batches and chunks in shuffled order, replays and crashes, and must build the same documents.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from cdcsync.config import Config
from cdcsync.config.document import DocumentConfig
from cdcsync.errors import ConfigError
from cdcsync.events import Change
from cdcsync.sync.documents.engine import Documents, fingerprint, specs
from cdcsync.sync.documents.follower import document_mapping
from cdcsync.sync.documents.mirror import Mirror
from cdcsync.sync.documents.tree import Tree, resolve
from cdcsync.sync.mapping import Row, TableMapping

COLUMNS = {
    "public.customers": ("id", "name"),
    "public.orders": ("id", "customer_id", "status"),
    "public.lines": ("order_id", "n", "product_id", "qty"),
    "public.products": ("sku", "title"),
    "public.tags": ("id", "label"),
    "public.order_tags": ("order_id", "tag_id"),
}
KEYS = {
    "public.customers": ("id",),
    "public.orders": ("id",),
    "public.lines": ("order_id", "n"),
    "public.products": ("sku",),
    "public.tags": ("id",),
    "public.order_tags": ("order_id", "tag_id"),
}
TYPES = {"sku": "text", "title": "text", "name": "text", "label": "text", "status": "text"}

ORDER = {
    "table": "public.orders",
    "columns": ["id", "status"],
    "rename": {"status": "state"},
    "children": {
        "customer": {"table": "public.customers", "relation": "many_to_one", "foreign_key": "customer_id"},
        "lines": {
            "table": "public.lines",
            "relation": "one_to_many",
            "foreign_key": "order_id",
            "columns": ["n", "qty"],
            "nested": True,
            "children": {
                "product": {"table": "public.products", "relation": "many_to_one", "foreign_key": "product_id"}
            },
        },
        "tags": {
            "table": "public.tags",
            "relation": "many_to_many",
            "through": {"table": "public.order_tags", "parent_key": "order_id", "child_key": "tag_id"},
            "scalar": "label",
        },
    },
}
CUSTOMER = {  # three levels below the root: customer -> orders -> lines -> product
    "table": "public.customers",
    "children": {
        "orders": {
            "table": "public.orders",
            "relation": "one_to_many",
            "foreign_key": "customer_id",
            "columns": ["id", "status"],
            "children": {
                "lines": {
                    "table": "public.lines",
                    "relation": "one_to_many",
                    "foreign_key": "order_id",
                    "columns": ["n"],
                    "children": {
                        "product": {
                            "table": "public.products",
                            "relation": "many_to_one",
                            "foreign_key": "product_id",
                            "columns": ["title"],
                        }
                    },
                }
            },
        }
    },
}


def mapping(table: str) -> TableMapping:
    types = {c: TYPES.get(c, "int") for c in COLUMNS[table]}
    return TableMapping(table=table, target=table.split(".")[1], key_columns=KEYS[table], types=types)


def lookup(text: str) -> tuple[str, TableMapping] | None:
    return (f"pg.{text}", mapping(text)) if text in COLUMNS else None


def tree(name: str, spec: dict[str, Any]) -> Tree:
    return resolve(name, name, DocumentConfig.model_validate(spec), f"documents.{name}", lookup)


def ident(table: str, row: dict[str, Any]) -> str:
    return "|".join(str(row[c]) for c in KEYS[table])


class Source:
    """Plain tables and the changes made to them, each with a higher version."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in COLUMNS}
        self.changes: list[Row] = []
        self.version = 1 << 16

    def put(self, table: str, **row: Any) -> None:
        self.tables[table][ident(table, row)] = row
        self._change(table, ident(table, row), dict(row))

    def delete(self, table: str, key: str) -> None:
        del self.tables[table][key]
        self._change(table, key, None)

    def _change(self, table: str, key: str, doc: dict[str, Any] | None) -> None:
        self.version += 1 << 16
        change = Change("pg", table, "d" if doc is None else "u", {}, doc, None, self.version, f"pg.{table}", 0, 0)
        self.changes.append(Row(change, table, key, doc))


def expected(source: Source, name: str) -> dict[str, dict[str, Any]]:
    """Every root's document, joined the obvious way over the final tables."""
    t = source.tables
    docs = {}
    if name == "orders":
        for key, order in t["public.orders"].items():
            lines = sorted((ident("public.lines", ln), ln) for ln in t["public.lines"].values()
                           if ln["order_id"] == order["id"])  # fmt: skip
            tags = sorted(
                (str(j["tag_id"]), t["public.tags"][str(j["tag_id"])]["label"])
                for j in t["public.order_tags"].values()
                if j["order_id"] == order["id"] and str(j["tag_id"]) in t["public.tags"]
            )
            docs[key] = {
                "id": order["id"],
                "state": order["status"],
                "customer": t["public.customers"].get(str(order["customer_id"])),
                "lines": [
                    {"n": ln["n"], "qty": ln["qty"], "product": t["public.products"].get(str(ln["product_id"]))}
                    for _, ln in lines
                ],
                "tags": [label for _, label in tags],
            }
    else:
        for key, customer in t["public.customers"].items():
            orders = sorted(
                (str(o["id"]), o) for o in t["public.orders"].values() if o["customer_id"] == customer["id"]
            )
            docs[key] = {
                **customer,
                "orders": [
                    {
                        "id": o["id"],
                        "status": o["status"],
                        "lines": [
                            {"n": ln["n"], "product": _title(t, ln["product_id"])}
                            for _, ln in sorted(
                                (ident("public.lines", ln), ln)
                                for ln in t["public.lines"].values()
                                if ln["order_id"] == o["id"]
                            )
                        ],
                    }
                    for _, o in orders
                ],
            }
    return docs


def _title(t: dict[str, dict[str, dict[str, Any]]], sku: str) -> dict[str, Any] | None:
    product = t["public.products"].get(str(sku))
    return {"title": product["title"]} if product else None


def engine(tmp: Path, *names: str) -> Documents:
    trees = [tree(n, ORDER if n == "orders" else CUSTOMER) for n in names]
    documents = {t.name: (t.root.table, fingerprint(t)) for t in trees}
    return Documents(trees, Mirror(tmp / "mirror.sqlite", specs(trees), documents))


def applied(documents: Documents, rows: list[Row]) -> None:
    documents.mirror.begin()
    documents.apply(rows)
    documents.mirror.commit()


def written(documents: Documents, store: dict[str, dict[str, tuple[int, Any]]]) -> None:
    """Write every dirty root into ``store`` under the apply rule (a newer version only), as a sink would."""
    for t in documents.trees:
        held = store.setdefault(t.name, {})
        while page := documents.rebuilt(t, 7):
            for built in page:
                if built.key not in held or held[built.key][0] < built.version:
                    held[built.key] = (built.version, built.doc)
            documents.mirror.writing(t.name, {b.key: b.version for b in page})
            documents.mirror.written(t.name, [b.key for b in page])


def live(store: dict[str, tuple[int, Any]]) -> dict[str, Any]:
    return {k: doc for k, (_, doc) in store.items() if doc is not None}


def workload(seed: int, steps: int) -> Source:
    """A shop's tables under random inserts, updates, child moves, key changes and deletes at every level."""
    rnd = random.Random(seed)
    s = Source()
    for c in range(1, 6):
        s.put("public.customers", id=c, name=f"c{c}")
    for p in range(1, 6):
        s.put("public.products", sku=f"p{p}", title=f"product {p}")
    for g in range(1, 4):
        s.put("public.tags", id=g, label=f"tag{g}")
    next_order = 1
    for _ in range(steps):
        t = s.tables
        what = rnd.random()
        if what < 0.15 or not t["public.orders"]:
            s.put("public.orders", id=next_order, customer_id=rnd.randint(1, 7), status="new")
            next_order += 1
        elif what < 0.35:
            order = rnd.choice(list(t["public.orders"].values()))
            n = rnd.randint(1, 4)
            s.put("public.lines", order_id=order["id"], n=n, product_id=f"p{rnd.randint(1, 6)}", qty=rnd.randint(1, 9))
        elif what < 0.45 and t["public.lines"]:  # a line moves to another order: its key changes (delete + insert)
            key = rnd.choice(list(t["public.lines"]))
            line = t["public.lines"][key]
            s.delete("public.lines", key)
            other = rnd.choice(list(t["public.orders"].values()))
            s.put("public.lines", **{**line, "order_id": other["id"]})
        elif what < 0.55:  # an order moves to another customer (a child moved: its foreign key updated)
            order = rnd.choice(list(t["public.orders"].values()))
            s.put("public.orders", **{**order, "customer_id": rnd.randint(1, 7)})
        elif what < 0.62:  # a middle level changes: fan-out to every order holding the product
            sku = f"p{rnd.randint(1, 6)}"
            if rnd.random() < 0.3 and sku in t["public.products"]:
                s.delete("public.products", sku)
            else:
                s.put("public.products", sku=sku, title=f"title {rnd.random():.3f}")
        elif what < 0.7:
            c = rnd.randint(1, 7)
            if rnd.random() < 0.3 and str(c) in t["public.customers"]:
                s.delete("public.customers", str(c))
            else:
                s.put("public.customers", id=c, name=f"name {rnd.random():.3f}")
        elif what < 0.8:
            order = rnd.choice(list(t["public.orders"].values()))
            tag = rnd.randint(1, 4)
            key = f"{order['id']}|{tag}"
            if key in t["public.order_tags"]:
                s.delete("public.order_tags", key)
            else:
                s.put("public.order_tags", order_id=order["id"], tag_id=tag)
        elif what < 0.85:
            g = rnd.randint(1, 4)
            s.put("public.tags", id=g, label=f"label {rnd.random():.3f}")
        elif what < 0.92:  # an order's key changes: its children follow (ON UPDATE CASCADE)
            order = rnd.choice(list(t["public.orders"].values()))
            old, new = order["id"], next_order
            next_order += 1
            s.put("public.orders", **{**order, "id": new})
            for key, line in list(t["public.lines"].items()):
                if line["order_id"] == old:
                    s.delete("public.lines", key)
                    s.put("public.lines", **{**line, "order_id": new})
            for key, join in list(t["public.order_tags"].items()):
                if join["order_id"] == old:
                    s.delete("public.order_tags", key)
                    s.put("public.order_tags", **{**join, "order_id": new})
            s.delete("public.orders", str(old))
        else:
            kind = rnd.choice(["public.orders", "public.lines"])
            if t[kind]:
                s.delete(kind, rnd.choice(list(t[kind])))
    return s


@pytest.mark.parametrize("seed", range(12))
def test_documents_match_the_join_whatever_the_batches_and_their_order(tmp_path: Path, seed: int) -> None:
    source = workload(seed, 400)
    documents = engine(tmp_path, "orders", "customers")
    rnd = random.Random(seed)
    store: dict[str, dict[str, tuple[int, Any]]] = {}
    changes = source.changes
    at = 0
    while at < len(changes):
        size = rnd.randint(1, 60)
        batch = changes[at : at + size]
        at += size
        # Spark promises no order inside a batch, and each topic's slice may come a batch later than another's
        shuffled = batch[:]
        rnd.shuffle(shuffled)
        for i in range(0, len(shuffled), 9):
            applied(documents, shuffled[i : i + 9])
        if rnd.random() < 0.2:  # the batch replayed (a crash before its offsets were committed)
            applied(documents, batch)
        written(documents, store)
    for name in ("orders", "customers"):
        assert live(store.get(name, {})) == expected(source, name), name


def test_a_crash_between_the_mirror_and_the_store_writes_the_documents_on_the_replay(tmp_path: Path) -> None:
    source = workload(99, 120)
    documents = engine(tmp_path, "orders")
    store: dict[str, dict[str, tuple[int, Any]]] = {}
    applied(documents, source.changes)  # committed to the mirror, then the process dies before any write
    documents.mirror.close()
    again = engine(tmp_path, "orders")  # restarted: the batch is replayed and finds every change applied
    older = 0
    again.mirror.begin()
    _, older = again.apply(source.changes)
    again.mirror.commit()
    assert older == len(source.changes)
    written(again, store)
    assert live(store["orders"]) == expected(source, "orders")


def test_a_late_change_of_another_table_still_raises_the_documents_version(tmp_path: Path) -> None:
    s = Source()
    s.put("public.customers", id=1, name="a")
    s.put("public.orders", id=1, customer_id=1, status="new")
    early, late = s.changes
    s.put("public.lines", order_id=1, n=1, product_id="p1", qty=1)
    documents = engine(tmp_path, "orders")
    store: dict[str, dict[str, tuple[int, Any]]] = {}
    applied(documents, [late, s.changes[2]])  # the order and its line: the lines topic ahead of customers
    written(documents, store)
    first = store["orders"]["1"][0]
    applied(documents, [early])  # the customer, older than what the document holds, arrives a batch later
    written(documents, store)
    version, doc = store["orders"]["1"]
    assert version > first
    assert doc["customer"] == {"id": 1, "name": "a"}


def test_a_deleted_root_leaves_a_delete_and_its_children_no_document(tmp_path: Path) -> None:
    s = Source()
    s.put("public.orders", id=1, customer_id=1, status="new")
    s.put("public.lines", order_id=1, n=1, product_id="p1", qty=1)
    s.delete("public.orders", "1")
    s.put("public.lines", order_id=1, n=2, product_id="p1", qty=1)  # an orphan: no document for it
    documents = engine(tmp_path, "orders")
    store: dict[str, dict[str, tuple[int, Any]]] = {}
    applied(documents, s.changes)
    written(documents, store)
    assert store["orders"]["1"][1] is None


def test_nested_objects_are_counted_at_every_level(tmp_path: Path) -> None:
    s = Source()
    s.put("public.orders", id=1, customer_id=1, status="new")
    for n in range(5):
        s.put("public.lines", order_id=1, n=n, product_id="p1", qty=1)
    documents = engine(tmp_path, "orders")
    applied(documents, s.changes)
    (built,) = documents.rebuilt(documents.trees[0], 10)
    assert built.nested == 5


def test_a_documents_target_declares_its_nested_arrays() -> None:
    props = document_mapping(tree("orders", ORDER)).field_mappings
    assert props == {"lines": {"type": "nested"}}
    deep = {**ORDER, "children": {"lines": {**ORDER["children"]["lines"], "nested": False,  # type: ignore[dict-item]
                                           "children": {"parts": {"table": "public.products", "relation": "one_to_many",
                                                                   "foreign_key": "sku", "references": "product_id",
                                                                   "nested": True}}}}}  # fmt: skip
    assert document_mapping(tree("orders", deep)).field_mappings == {
        "lines": {"properties": {"parts": {"type": "nested"}}}
    }


# -- the config ------------------------------------------------------------------------------------------------


def _config(document: dict[str, Any], **follower: Any) -> Config:
    source = {"name": "pg", "kind": "postgres", "port": 5432, "database": "shop", "user": "u", "password": "p",
              "tables": list(COLUMNS)}  # fmt: skip
    entry = {"name": "docs", "kind": "elasticsearch", "url": "http://127.0.0.1:9200", "documents": {"orders": document}}
    return Config.model_validate({"sources": [source], "followers": [{**entry, **follower}]})


def test_a_document_follower_follows_every_table_of_its_trees() -> None:
    config = _config(ORDER)
    tables = [str(t) for _, t in config.followed_tables(config.followers[0])]
    assert tables == ["public.orders", "public.customers", "public.lines", "public.products", "public.tags",
                      "public.order_tags"]  # fmt: skip


@pytest.mark.parametrize(
    ("document", "follower", "says"),
    [
        ({**ORDER, "children": {"x": {"table": "public.orders", "relation": "one_to_many", "foreign_key": "id"}}},
         {}, "public.orders is already on the path from the root"),
        ({**ORDER, "children": {"x": {"table": "public.customers", "relation": "one_to_many"}}},
         {}, "a one_to_many relation needs foreign_key"),
        ({**ORDER, "children": {"x": {"table": "public.tags", "relation": "many_to_many"}}},
         {}, "a many_to_many relation needs through"),
        ({**ORDER, "children": {"x": {"table": "public.nope", "relation": "one_to_many", "foreign_key": "a"}}},
         {}, "followers[docs].documents.orders.children.x.table: public.nope is not a table source pg captures"),
        ({**ORDER, "children": {"x": {"table": "public.customers", "relation": "many_to_one", "foreign_key": "a",
                                       "scalar": "name"}}}, {}, "scalar makes an array"),
        (ORDER, {"tables": ["pg.public.orders"]}, "a follower keeps documents or tables, not both"),
        (ORDER, {"kind": "delta", "url": None}, "a delta follower keeps tables"),
    ],
)  # fmt: skip
def test_a_wrong_document_is_refused_with_its_path_and_the_fix(
    document: dict[str, Any], follower: dict[str, Any], says: str
) -> None:
    with pytest.raises(Exception) as err:  # noqa: PT011 (pydantic's ValidationError, or ConfigError)
        _config(document, **follower)
    assert says in str(err.value)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"columns": ["id", "nope"]}, "documents.orders.columns: table public.orders has no column(s) ['nope']"),
        ({"children": {"c": {"table": "public.customers", "relation": "many_to_one", "foreign_key": "cust"}}},
         "documents.orders.children.c.foreign_key: table public.orders has no column(s) ['cust']"),
        ({"children": {"l": {"table": "public.lines", "relation": "one_to_many", "foreign_key": ["order_id", "n"]}}},
         "2 column(s) ['order_id', 'n'] reference 1 column(s) ['id'] of public.orders"),
        ({"rename": {"qty": "q"}}, "documents.orders.rename: ['qty'] are not among the document's columns"),
        ({"rename": {"status": "customer"}}, "field(s) ['customer'] named twice"),
    ],
)  # fmt: skip
def test_a_document_that_does_not_fit_its_tables_is_refused_at_start(change: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as err:
        tree("orders", {**ORDER, **change})
    assert any(says in p for p in err.value.problems), err.value.problems


def test_a_table_without_a_primary_key_cannot_be_in_a_document() -> None:
    def keyless(text: str) -> tuple[str, TableMapping] | None:
        found = lookup(text)
        if found and text == "public.tags":
            return found[0], TableMapping(table=text, target="tags", types=found[1].types)
        return found

    with pytest.raises(ConfigError, match="table public.tags has no primary key"):
        resolve("orders", "orders", DocumentConfig.model_validate(ORDER), "documents.orders", keyless)


def test_commands_for_followers_of_tables_refuse_a_document_follower_and_say_what_to_do(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    config = _config(ORDER).model_dump(mode="json", exclude_none=True)
    config["sources"][0]["password"] = "p"
    path = tmp_path / "cdcsync.yaml"
    path.write_text(yaml.safe_dump(config))
    for command, says in (
        (["bootstrap", "docs", "--from", "source"], "--from source: follower docs keeps documents, built from"),
        (["reindex", "docs", "--table", "pg.public.orders"], "--table: follower docs keeps documents, rebuilt from"),
        (["verify", "docs", "--table", "pg.public.orders"], "--table: follower docs keeps documents"),
    ):
        done = subprocess.run([sys.executable, "-m", "cdcsync", "--config", str(path), *command],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2, (command, done.stderr)
        assert says in done.stderr, (command, done.stderr)


def test_a_changed_mapping_writes_every_document_again_with_what_the_mirror_holds(tmp_path: Path) -> None:
    source = workload(5, 200)
    first = engine(tmp_path, "orders")
    store: dict[str, dict[str, tuple[int, Any]]] = {}
    applied(first, source.changes)
    written(first, store)
    first.mirror.close()
    # The same follower restarted with the order's customer id in the document and a relation new to the tree,
    # over a column of a table the mirror holds already (lines by product: an index new to that table).
    sold = {"table": "public.lines", "relation": "one_to_many", "foreign_key": "order_id", "scalar": "product_id"}
    changed = {**ORDER, "columns": ["id", "status", "customer_id"], "children": {**ORDER["children"], "sold": sold}}
    trees = [tree("orders", changed)]
    documents = {"orders": ("public.orders", fingerprint(trees[0]))}
    again = Documents(trees, Mirror(tmp_path / "mirror.sqlite", specs(trees), documents))
    assert again.mirror.pending_count("orders") == len(source.tables["public.orders"]) + sum(
        1 for v in store["orders"].values() if v[1] is None
    )
    written(again, store)
    want = expected(source, "orders")
    for key, doc in live(store["orders"]).items():
        order = source.tables["public.orders"][key]
        lines = sorted((ident("public.lines", ln), ln["product_id"]) for ln in source.tables["public.lines"].values()
                       if ln["order_id"] == order["id"])  # fmt: skip
        assert doc == {**want[key], "customer_id": order["customer_id"], "sold": [p for _, p in lines]}


def test_an_index_new_to_a_table_is_filled_from_the_rows_the_mirror_holds(tmp_path: Path) -> None:
    s = Source()
    s.put("public.customers", id=1, name="a")
    s.put("public.orders", id=1, customer_id=1, status="new")
    trees = [tree("orders", {"table": "public.orders"}), tree("customers", {"table": "public.customers"})]
    plain = {t.name: (t.root.table, "a") for t in trees}
    first = Documents(trees, Mirror(tmp_path / "m.sqlite", specs(trees), plain))
    applied(first, s.changes)
    first.mirror.close()
    # customers as roots, with their orders: orders are found by customer_id, an index the mirror lacked
    orders = {"table": "public.orders", "relation": "one_to_many", "foreign_key": "customer_id", "columns": ["id"]}
    trees = [tree("customers", {"table": "public.customers", "children": {"orders": orders}})]
    again = Documents(trees, Mirror(tmp_path / "m.sqlite", specs(trees), {"customers": ("public.customers", "b")}))
    store: dict[str, dict[str, tuple[int, Any]]] = {}
    written(again, store)
    assert live(store["customers"]) == {"1": {"id": 1, "name": "a", "orders": [{"id": 1}]}}


def test_a_follower_whose_mirror_was_lost_behind_its_checkpoint_refuses_to_start(tmp_path: Path) -> None:
    from cdcsync.errors import FatalError
    from cdcsync.sync.documents.build import check_state

    checkpoint, mirror = tmp_path / "ckpt", tmp_path / "mirror.sqlite"
    check_state("docs", checkpoint, mirror)  # a new follower: neither
    checkpoint.mkdir()
    (checkpoint / "offsets").mkdir()
    with pytest.raises(FatalError, match=r"mirror .* is gone.*remove .*ckpt, then `cdcsync bootstrap docs`"):
        check_state("docs", checkpoint, mirror)
    mirror.touch()
    check_state("docs", checkpoint, mirror)


def test_a_root_never_seen_is_not_deleted_and_a_deleted_one_is(tmp_path: Path) -> None:
    s = Source()
    s.put("public.lines", order_id=1, n=1, product_id="p1", qty=1)  # its order not there (yet, or ever)
    documents = engine(tmp_path, "orders")
    applied(documents, s.changes)
    (orphan,) = documents.rebuilt(documents.trees[0], 10)
    assert orphan.doc is None and orphan.written == -1  # the follower writes nothing for it
    store: dict[str, dict[str, tuple[int, Any]]] = {}
    s.put("public.orders", id=1, customer_id=1, status="new")
    s.delete("public.orders", "1")
    applied(documents, s.changes[1:2])
    written(documents, store)
    applied(documents, s.changes[2:])
    (gone,) = documents.rebuilt(documents.trees[0], 10)
    assert gone.doc is None and gone.written >= 0  # written before: its delete is written
