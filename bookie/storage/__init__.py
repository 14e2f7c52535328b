"""Bookie storage: journal with group commit, entry logs, index, checkpoints."""
