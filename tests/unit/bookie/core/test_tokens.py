"""Client tokens: the token file's rules, and the bookie's AUTH rules (a connection is served
only after it presented a known token), against the handler test's minimal shell."""

from __future__ import annotations

from pathlib import Path

import cbor2
import pytest

from bookie import limits
from bookie.core.tokens import Grant, Role, TokenTable, parse_client_token, parse_token_table
from bookie.errors import InvalidConfig, Status
from bookie.net.credentials import TOKEN_FILE_VARIABLE, environment_token
from bookie.wire.codec import UndecodableRequest, decode_request
from bookie.wire.messages import (
    READ_FLAG_FENCE,
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    IdentifyRequest,
    ReadRequest,
    ReadResponse,
    WriteLacRequest,
)
from tests.unit.bookie.core.test_bookie_handler import Bookie

ALICE = b"alice-token-0123456789"
BOB = b"bob-token-9876543210xyz"
KEY = b"k" * 32


def table() -> TokenTable:
    return TokenTable({"alice": (ALICE, Role.WRITE), "bob": (BOB, Role.READ)})


def test_a_token_file_names_principals_and_ignores_comments() -> None:
    text = f"# clients\n\nalice {ALICE.decode()}\n  bob   {BOB.decode()}  Read\n"
    parsed = parse_token_table(text, "tokens")
    assert parsed.grants == [Grant("alice", Role.WRITE), Grant("bob", Role.READ)]
    assert parsed.grant_of(ALICE) == Grant("alice", Role.WRITE)
    assert parsed.grant_of(BOB) == Grant("bob", Role.READ)
    assert parsed.grant_of(b"alice-token-012345678") is None
    assert parsed.grant_of(b"") is None


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (f"alice {ALICE.decode()} write x", "line 1: expected 'PRINCIPAL TOKEN [ROLE]', found 4"),
        (f"alice {ALICE.decode()} root", "line 1: a role is one of read, write, admin"),
        (f"al/ice {ALICE.decode()}", "line 1: a principal is"),
        (f"{'a' * (limits.principal_chars_max + 1)} {ALICE.decode()}", "line 1: a principal"),
        ("alice short", "line 1: a token is 16 to 256"),
        (f"alice {'x' * (limits.auth_token_bytes_max + 1)}", "line 1: a token is"),
        ("alice caf\u00e9-token-0123456789", "line 1: a token is"),
        (f"alice {ALICE.decode()}\nalice {BOB.decode()}", "line 2: principal alice is named twice"),
        (f"alice {ALICE.decode()}\nbob {ALICE.decode()}", "line 2: this token is given to two"),
        ("# nobody\n\n", "names no client"),
    ],
)
def test_a_bad_token_file_is_refused_by_line_without_showing_a_token(
    text: str, complaint: str
) -> None:
    with pytest.raises(InvalidConfig) as refused:
        parse_token_table(text, "tokens")
    assert complaint in str(refused.value)
    for word in text.split():
        if len(word) >= limits.auth_token_bytes_min:
            assert word not in str(refused.value)


def test_a_client_token_file_holds_one_token() -> None:
    assert parse_client_token(f"  {ALICE.decode()}\n", "file") == ALICE
    with pytest.raises(InvalidConfig, match="file: a token is"):
        parse_client_token("two words-0123456789", "file")


def test_without_a_table_auth_succeeds_with_no_principal_and_nothing_is_refused() -> None:
    bookie = Bookie()
    answer = bookie.one(AuthRequest(1, b"anything"))
    assert answer.response == AuthResponse(1, Status.EOK, None, None)
    assert bookie.one(IdentifyRequest(2)).response.status == Status.EOK


def test_requests_before_auth_are_refused_and_change_nothing() -> None:
    bookie = Bookie(tokens=table())
    answer = bookie.one(AddRequest(1, 7, 0, KEY, 0, b"packet"))
    assert answer.response == AddResponse(
        1, Status.EUNAUTHENTICATED, "this bookie requires a client token: send AUTH first"
    )
    assert not bookie.storage.recovered_ledgers()
    read = bookie.one(ReadRequest(2, 7, 0, 0, None, None, None)).response
    assert isinstance(read, ReadResponse)
    assert read.status == Status.EUNAUTHENTICATED
    assert bookie.handler.unauthenticated_requests == 2
    assert bookie.handler.auth_failures == 0


def test_a_known_token_serves_its_connection_only() -> None:
    bookie = Bookie(tokens=table())
    answer = bookie.one(AuthRequest(1, BOB), connection_id=1)
    assert answer.response == AuthResponse(1, Status.EOK, None, "bob")
    assert bookie.handler.grant(1) == Grant("bob", Role.READ)
    assert bookie.one(IdentifyRequest(2), connection_id=1).response.status == Status.EOK
    other = bookie.one(IdentifyRequest(3), connection_id=2).response
    assert other.status == Status.EUNAUTHENTICATED


def test_an_unknown_token_is_counted_and_ends_a_connections_authentication() -> None:
    bookie = Bookie(tokens=table())
    bookie.one(AuthRequest(1, ALICE))
    answer = bookie.one(AuthRequest(2, b"mallory-token-000000"))
    assert answer.response == AuthResponse(2, Status.EUNAUTHENTICATED, "unknown client token")
    assert bookie.handler.auth_failures == 1
    assert bookie.handler.grant(1) is None
    assert bookie.one(IdentifyRequest(3)).response.status == Status.EUNAUTHENTICATED


def test_a_closed_connection_forgets_its_principal() -> None:
    bookie = Bookie(tokens=table())
    bookie.one(AuthRequest(1, ALICE), connection_id=5)
    bookie.handler.drop_connection(5)
    assert bookie.handler.grant(5) is None
    assert bookie.one(IdentifyRequest(2), connection_id=5).response.status == (
        Status.EUNAUTHENTICATED
    )


def test_an_over_long_token_is_a_bad_request_that_does_not_show_it() -> None:
    token = b"s" * (limits.auth_token_bytes_max + 1)
    with pytest.raises(UndecodableRequest) as refused:
        decode_request(cbor2.dumps([limits.protocol_version, 9, 4, token]))
    assert refused.value.status == Status.EBADREQ
    assert "257 bytes, not shown" in str(refused.value)
    assert "sss" not in str(refused.value)


def test_the_process_token_is_read_from_the_file_the_environment_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(TOKEN_FILE_VARIABLE, raising=False)
    assert environment_token() is None
    file = tmp_path / "token"
    file.write_text(ALICE.decode() + "\n")
    monkeypatch.setenv(TOKEN_FILE_VARIABLE, str(file))
    assert environment_token() == ALICE
    monkeypatch.setenv(TOKEN_FILE_VARIABLE, str(tmp_path / "missing"))
    with pytest.raises(InvalidConfig, match=r"BOOKIE_TOKEN_FILE=.*missing: cannot read it"):
        environment_token()


def test_a_read_token_reads_but_never_adds_writes_a_lac_or_fences() -> None:
    bookie = Bookie(tokens=table())
    bookie.one(AuthRequest(1, ALICE), connection_id=1)
    assert bookie.one(AddRequest(2, 7, 0, KEY, 0, b"packet"), connection_id=1).response.status == (
        Status.EOK
    )
    bookie.one(AuthRequest(3, BOB), connection_id=2)
    reader = [
        ReadRequest(4, 7, 0, 0, None, None, None),
        IdentifyRequest(5),
    ]
    for request in reader:
        assert bookie.one(request, connection_id=2).response.status == Status.EOK
    writes = [
        AddRequest(6, 7, 1, KEY, 0, b"packet"),
        WriteLacRequest(7, 7, KEY, 0, b"lac"),
        ReadRequest(8, 7, 0, READ_FLAG_FENCE, KEY, None, None),
    ]
    for request in writes:
        answer = bookie.one(request, connection_id=2).response
        assert answer.status == Status.EFORBIDDEN
        assert answer.message == "bob may read, not write, fence or add"
    assert bookie.handler.forbidden_requests == 3
    assert not bookie.handler.is_fenced(7)
