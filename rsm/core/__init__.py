"""Pure cores of the state-machine framework: decisions without I/O.

Nothing here imports anyio, kazoo, socket, os or time, or uses global
randomness (`tests/test_layering.py` enforces it); time and randomness come in
as arguments, so the replica runtime and the seeded simulation drive the same
code deterministically.
"""
