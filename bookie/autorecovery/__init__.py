"""Autorecovery: a lost bookie's ledgers copied back to full replication.

`settings.py` (what a process runs with), `connect.py` (connections checked to
reach the bookie meant), `worker.py` (repairs marked ledgers),
`auditor.py` (elected; marks the ledgers of lost bookies), `service.py` (both,
in a bookie process or a standalone `bookie autorecovery`).  The decisions are
in `bookie/core/rereplication.py`, `bookie/core/auditor.py` and
`bookie/core/open_ledgers.py` (when an open ledger is fenced), the ZooKeeper
state in `bookie/meta/underreplication.py`; docs/operations.md, "Autorecovery".
"""
