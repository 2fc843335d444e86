"""System views in Tarantool 2.6's shapes, and SELECTs on them answered as Tarantool would.

The expected shapes follow a real Tarantool 2.6's rows (`box.space._vspace:get(id)` and
`box.space._vindex:select(id)` after `CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)`):
the field order and the format and part keys clients read. Tarantool also lists keys
no connector reads (`nullable_action`, `sort_order`), which we leave out.
"""

import pytest

from replicaset.iproto import (
    ErrorCode,
    Field,
    Key,
    RemoteProtocolError,
    Space,
    SystemView,
    build_system_views,
    decode_select,
    select_system_view,
)

KV_FIELDS = (
    Field(name="k", type="integer", is_nullable=False),
    Field(name="v", type="string", is_nullable=True),
)
KV = Space(id=513, name="kv", fields=KV_FIELDS, primary_key=(0,))
PAIRS = Space(
    id=512,
    name="pairs",
    fields=(
        Field(name="a", type="string", is_nullable=False),
        Field(name="b", type="integer", is_nullable=False),
    ),
    primary_key=(1, 0),
)
NO_KEY = Space(id=514, name="scratch", fields=(Field(name="x", type="any", is_nullable=True),), primary_key=())
VIEWS = build_system_views([KV, PAIRS, NO_KEY])

# net.box's connect: SELECT with ITER_ALL (2), an empty key, offset 0, limit 0xFFFFFFFF.
NETBOX_BODY = {Key.INDEX_ID: 0, Key.ITERATOR: 2, Key.OFFSET: 0, Key.LIMIT: 0xFFFFFFFF, Key.KEY: []}


def select(space_id: int, **fields: object) -> list[list]:
    body = {Key.SPACE_ID: space_id, **{Key[name.upper()]: value for name, value in fields.items()}}
    return select_system_view(VIEWS, decode_select(body))


def refusal(body: dict) -> RemoteProtocolError:
    with pytest.raises(RemoteProtocolError) as info:
        select_system_view(VIEWS, decode_select(body))
    assert info.value.fatal is False
    return info.value


def test_vspace_row_has_tarantool_field_order_and_format() -> None:
    kv = select(SystemView.VSPACE, key=[513])
    assert kv == [
        [513, 1, "kv", "memtx", 0, {}, [
            {"name": "k", "type": "integer", "is_nullable": False},
            {"name": "v", "type": "string", "is_nullable": True},
        ]]
    ]


def test_vindex_row_has_tarantool_field_order_and_parts_taken_from_the_format() -> None:
    assert select(SystemView.VINDEX, key=[512]) == [
        [512, 0, "pk", "tree", {"unique": True}, [
            {"field": 1, "type": "integer", "is_nullable": False},
            {"field": 0, "type": "string", "is_nullable": False},
        ]]
    ]


def test_netbox_connect_selects_get_every_row_in_primary_key_order() -> None:
    spaces = select_system_view(VIEWS, decode_select({Key.SPACE_ID: 281, **NETBOX_BODY}))
    assert [row[0] for row in spaces] == [512, 513, 514]
    indexes = select_system_view(VIEWS, decode_select({Key.SPACE_ID: 289, **NETBOX_BODY}))
    assert [row[:2] for row in indexes] == [[512, 0], [513, 0]], "a table without a key has no index row"
    assert select_system_view(VIEWS, decode_select({Key.SPACE_ID: 277, **NETBOX_BODY})) == []


def test_connector_lookups_by_id_and_by_name() -> None:
    # PyPI `tarantool`: EQ (the default iterator) on _vspace by id (index 0) or name (index 2),
    # on _vindex by space id (index 0, a partial key) or by space id and name (index 2).
    assert [row[2] for row in select(SystemView.VSPACE, key=["kv"], index_id=2)] == ["kv"]
    assert select(SystemView.VSPACE, key=["nope"], index_id=2) == []
    assert [row[0] for row in select(SystemView.VSPACE, key=[1], index_id=1)] == [512, 513, 514]
    assert [row[:3] for row in select(SystemView.VINDEX, key=[513, "pk"], index_id=2)] == [[513, 0, "pk"]]
    assert select(SystemView.VINDEX, key=[513, 1]) == []
    assert select(SystemView.VINDEX, key=[]) == select(SystemView.VINDEX)


def test_offset_and_limit() -> None:
    assert [row[0] for row in select(SystemView.VSPACE, offset=1, limit=1)] == [513]
    assert select(SystemView.VSPACE, offset=5) == []


def test_other_spaces_are_refused_naming_what_is_answered() -> None:
    error = refusal({Key.SPACE_ID: 513})
    assert error.code == ErrorCode.UNSUPPORTED
    assert "SELECT on space 513 is not supported" in error.message
    assert "_vcollation (277), _vspace (281), _vindex (289)" in error.message
    assert "EXECUTE" in error.message


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        ({}, ErrorCode.MISSING_REQUEST_FIELD, "SPACE_ID"),
        ({Key.SPACE_ID: "281"}, ErrorCode.ILLEGAL_PARAMS, "SPACE_ID"),
        ({Key.SPACE_ID: 281, Key.LIMIT: -1}, ErrorCode.ILLEGAL_PARAMS, "LIMIT"),
        ({Key.SPACE_ID: 281, Key.KEY: 513}, ErrorCode.ILLEGAL_PARAMS, "KEY"),
        ({Key.SPACE_ID: 289, Key.INDEX_ID: 1}, ErrorCode.NO_SUCH_INDEX_ID, "No index #1 is defined in space '_vindex'"),
        ({Key.SPACE_ID: 281, Key.KEY: [True]}, ErrorCode.KEY_PART_TYPE, "expected unsigned"),
        ({Key.SPACE_ID: 281, Key.INDEX_ID: 2, Key.KEY: [513]}, ErrorCode.KEY_PART_TYPE, "expected string"),
        ({Key.SPACE_ID: 281, Key.KEY: [513, 0]}, ErrorCode.KEY_PART_COUNT, "expected [0..1], got 2"),
        ({Key.SPACE_ID: 281, Key.ITERATOR: 6, Key.KEY: [512]}, ErrorCode.UNSUPPORTED, "EQ (0) and ALL (2), not 6"),
        ({Key.SPACE_ID: 281, Key.ITERATOR: 2, Key.KEY: [512]}, ErrorCode.UNSUPPORTED, "ALL takes an empty key"),
    ],
)
def test_malformed_or_unsupported_selects_are_refused_with_tarantool_codes(body, code, words) -> None:
    error = refusal(body)
    assert error.code == code
    assert words in error.message
