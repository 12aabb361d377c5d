"""The SPI side of the in-server runtime that needs no server: placeholders and values."""

import numpy as np

from pgrag.queries import queries
from pgrag.spi import _to_sql, positional


def test_named_placeholders_become_positional_in_order_of_first_use():
    text, names = positional("SELECT %(b)s, %(a)s, %(b)s, 'x%%y' WHERE c = %(c)s")
    assert text == "SELECT $1, $2, $1, 'x%y' WHERE c = $3"
    assert names == ["b", "a", "c"]


def test_every_named_query_converts_without_leftover_placeholders():
    for name, sql in queries().items():
        text, names = positional(sql)
        assert "%(" not in text, name
        assert sorted(names) == sorted(set(names)), name
        for i in range(1, len(names) + 1):
            assert f"${i}" in text, name


def test_values_are_passed_as_postgresql_reads_them():
    vec = np.array([0.5, -1.25, 2.0], dtype=np.float32)
    assert _to_sql(vec, "vector") == "[0.5,-1.25,2.0]"
    assert _to_sql([vec, vec], "vector[]") == ["[0.5,-1.25,2.0]"] * 2
    assert _to_sql({"a": [1, "x"]}, "jsonb") == '{"a": [1, "x"]}'
    assert _to_sql([{"a": 1}, {}], "jsonb[]") == ['{"a": 1}', '{}']
    assert _to_sql(np.array([1, 2]), "bigint[]") == [1, 2]
    assert _to_sql([np.int64(3), 4], "bigint[]") == [3, 4] and type(_to_sql([np.int64(3)], "bigint[]")[0]) is int
    assert _to_sql(np.float64(0.25), "double precision") == 0.25
    assert _to_sql(None, "vector") is None
