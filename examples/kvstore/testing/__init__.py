"""Test tooling that ships with the key-value store: its run in the seeded simulation.

`workload` holds an observed `KVStore`, a minimal Redis client over any byte
stream and the simulated Redis clients of a run; `kv_sim` plugs them into the
framework's whole-cluster simulation (`rsm.testing.rsm_sim`), beside each
replica the store's real server side (router, forwarding, RESP server).
"""
