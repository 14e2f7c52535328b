"""A replicated key-value store that speaks the Redis protocol, built on rsm."""
