"""Bookie wire protocol: messages, frames, entry packets (pure, no I/O)."""
