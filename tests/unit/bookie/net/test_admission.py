"""Which connections a server admits: at most so many in total, and so many per host."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bookie.net.admission import ConnectionAdmission, Refusal, peer_host


def test_peer_host_of_a_tcp_peer_and_of_anything_else() -> None:
    assert peer_host(("10.0.0.7", 3181)) == "10.0.0.7"
    assert peer_host(("::1", 3181, 0, 0)) == "::1"
    assert peer_host(None) is None
    assert peer_host("10.0.0.7:3181") is None


def test_one_host_cannot_take_every_slot() -> None:
    admission = ConnectionAdmission(total_max=3, per_address_max=2)
    assert admission.admit("a") is None
    assert admission.admit("a") is None
    assert admission.admit("a") is Refusal.ADDRESS_FULL
    assert admission.admit("b") is None
    assert admission.admit("c") is Refusal.SERVER_FULL
    assert admission.count == 3
    admission.release("a")
    assert admission.admit("c") is None


def test_connections_without_an_address_count_toward_the_total_only() -> None:
    admission = ConnectionAdmission(total_max=2, per_address_max=1)
    assert admission.admit(None) is None
    assert admission.admit(None) is None
    assert admission.admit(None) is Refusal.SERVER_FULL


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "c", None])), max_size=60))
def test_the_counts_follow_admissions_and_releases(
    steps: list[tuple[bool, str | None]],
) -> None:
    admission = ConnectionAdmission(total_max=5, per_address_max=2)
    held: list[str | None] = []
    for opening, host in steps:
        if opening:
            refusal = admission.admit(host)
            expected = (
                Refusal.SERVER_FULL
                if len(held) >= 5
                else Refusal.ADDRESS_FULL
                if host is not None and held.count(host) >= 2
                else None
            )
            assert refusal is expected
            if refusal is None:
                held.append(host)
        elif host in held:
            held.remove(host)
            admission.release(host)
        assert admission.count == len(held)
