"""Test and development helpers shipped with the package (real ZooKeeper launcher, simulation)."""
