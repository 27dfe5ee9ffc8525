"""How a snapshot signal names a table: Debezium reads the entry as a regex, then as a table id."""

from cdcsync.config import SourceConfig, TableRef
from cdcsync.connectors.signals import data_collection, unsignalable

PG = SourceConfig(name="pg", kind="postgres", port=5432, database="d", user="u", password="x", tables=["public.t"])


def test_a_plain_name_goes_as_it_is_and_any_other_double_quoted() -> None:
    assert data_collection(TableRef(namespace="Sales", table="Events")) == "Sales.Events"
    # '$' would be an anchor: "inventory.orders$" would match the table inventory.orders.
    assert data_collection(TableRef(namespace="inventory", table="orders$")) == '"inventory"."orders$"'
    named = TableRef(namespace="public", table='Late (v2+).x "q"')
    assert data_collection(named) == '"public"."Late (v2+).x ""q"""'
    assert data_collection(TableRef(namespace="my schema", table="café")) == '"my schema"."café"'


def test_a_name_no_regex_can_carry_is_refused_naming_the_table() -> None:
    fine = [TableRef(namespace="public", table="Late (v2+).x"), TableRef(namespace="public", table="a [b]")]
    assert unsignalable(PG, fine) == []
    bad = [TableRef(namespace="public", table=name) for name in ("open (", "a{1", "back\\slash", "x [")]
    refused = unsignalable(PG, bad)
    assert len(refused) == 4
    assert refused[0].startswith("source pg: cannot add public.open ( to the running connector")
    assert "Rename the table, or create the connector anew" in refused[0]
