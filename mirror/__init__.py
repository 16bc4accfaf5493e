"""MirrorMaker 2 over Kafka clients: the shell that runs linkd/core/mirror's rules.

It replicates between any clusters that speak the Kafka protocol (Apache Kafka,
other brokers, linkd daemons through `--kafka-listen`) with confluent-kafka
clients. Every rule (names, filters, offset syncs, translation, checkpoints,
group offset sync, heartbeats, config/ACL sync, exactly-once, metrics,
`mm2.properties`) is the core's; this package does the I/O.

Modules:
- clients: librdkafka configurations of a cluster alias.
- admin_ops: the admin calls, translated to the core's values.
- engine: one flow (source task + checkpoint task) and heartbeat tasks.
- runner: every flow of a configuration, continuous or once.
- cli: `ccr-admin mirror --config mm2.properties` and `python -m mirror`.

Theory of operation: `runner.load_config` parses the file with
`parse_mm2_properties`; `MirrorRunner` starts one `FlowEngine` per enabled flow
and one `HeartbeatTask` per pair, then steps them in one bounded loop.
"""
