"""Metadata store (ZooKeeper and in-memory), znode layout and metadata formats."""
