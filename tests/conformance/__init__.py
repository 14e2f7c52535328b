"""Contract suites: one set of tests run against every implementation of a protocol."""
