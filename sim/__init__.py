"""Deterministic simulation of replication topologies and network partitions.

A virtual shell around `linkd/core`: the core's replication rules, procedures
and link driver, driven by a virtual clock, a virtual network and seeded
choices.
"""
