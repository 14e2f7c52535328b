"""Pure decision logic of bookies and ledger clients: no I/O, time or global randomness."""
