"""The bookie server: anyio network shell around the bookie core and storage."""
