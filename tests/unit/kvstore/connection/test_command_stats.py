"""Commands and error replies counted per connection, folded, and written as Redis's INFO."""

from __future__ import annotations

from kvstore.connection.command_stats import (
    CommandStats,
    commandstats_fields,
    error_code,
    errorstats_fields,
)


def test_counts_fold_and_read_as_redis_writes_them() -> None:
    first, second = CommandStats(), CommandStats()
    first.call("get")
    first.call("get")
    first.fail("incr", "ERR value is not an integer or out of range")
    first.call("incr")
    second.reject("get", "ERR wrong number of arguments for 'get' command")
    second.reject(None, "ERR unknown command 'nosuch', with args beginning with: ")
    second.fail("lpush", "WRONGTYPE Operation against a key holding the wrong kind of value")
    second.error("ERR Protocol error: invalid bulk length")
    total = CommandStats.total([first, second])
    assert commandstats_fields(total) == [
        ("cmdstat_get", "calls=2,rejected_calls=1,failed_calls=0"),
        ("cmdstat_incr", "calls=1,rejected_calls=0,failed_calls=1"),
        ("cmdstat_lpush", "calls=0,rejected_calls=0,failed_calls=1"),
    ]
    assert errorstats_fields(total) == [
        ("errorstat_ERR", "count=4"),
        ("errorstat_WRONGTYPE", "count=1"),
    ]
    assert first.calls == {"get": 2, "incr": 1}, "folding leaves the parts alone"


def test_error_code_is_the_first_word() -> None:
    assert error_code("TRYAGAIN the command was not applied") == "TRYAGAIN"
    assert error_code("NOSCRIPT") == "NOSCRIPT"
