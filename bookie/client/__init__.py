"""The ledger client: async API over bookie connections and the metadata store."""
