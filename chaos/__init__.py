"""Fault injection against real daemons: a controllable TCP proxy and chaos runs."""
