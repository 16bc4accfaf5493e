"""Deterministic simulation of replication topologies and network partitions.

A virtual shell around `linkd/core`: the same replication rules the daemons
run, driven by a virtual clock, a virtual network and seeded choices.
"""
