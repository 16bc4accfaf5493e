"""Topic, config and ACL administration over the Kafka protocol.

Rules:
- CreateTopics: num_partitions -1 means 1 (Kafka's num.partitions default);
  replication factor -1 or 1 is accepted, anything larger answers
  INVALID_REPLICATION_FACTOR (the cluster has one broker); explicit replica
  assignments must name that broker. Config entries with a null value are
  left out (null means "the default"). validate_only runs every check of the
  core and changes nothing.
- DeleteTopics accepts names or (v6+) topic ids.
- CreatePartitions ignores replica assignments that name the one broker.
- DescribeConfigs serves TOPIC resources (every topic config Kafka 4.x
  has: its value, its source and its synonyms, as linkd/core/broker_config.py
  describes them: the topic's own setting, a broker level's server default,
  Kafka's default), BROKER resources ("0": the daemon's settings read-only
  and the dynamic configs with their levels; "": what the cluster-wide
  default level sets) and GROUP resources (KIP-848's group configs).
- AlterConfigs and IncrementalAlterConfigs alter all three: a topic's
  configs, a broker level's dynamic configs (journalled, taking effect at
  once), a group's configs. SET, DELETE, APPEND and SUBTRACT (list configs
  only, as Kafka computes them: `broker_config.list_change`); AlterConfigs
  replaces the resource's whole set, as Kafka's legacy call does; a key named
  twice is INVALID_REQUEST. validate_only runs every check and changes nothing.
- ACLs: the core stores and describes them (linkd/core/acls.py); every
  binding and filter is answered on its own.
- Authorization (`--authorizer acl`, linkd/kafka/authz.py), Kafka's:
  CreateTopics needs CREATE on the cluster or the topic (and DESCRIBE_CONFIGS
  on it to be shown its configs); DeleteTopics DELETE, CreatePartitions
  ALTER on each topic; DescribeConfigs DESCRIBE_CONFIGS and the alter calls
  ALTER_CONFIGS on the topic, the cluster (a broker resource) or the group.
  A refused resource answers TOPIC_, CLUSTER_ or GROUP_AUTHORIZATION_FAILED
  and the others go on. The ACL calls need DESCRIBE / ALTER on the cluster,
  checked by the listener (authz.CLUSTER_OPERATION).
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode as K

from linkd.core.acls import CLUSTER_RESOURCE_NAME, AclBinding, AclFilter
from linkd.core.acls import AclOperation as Op
from linkd.core.acls import ResourceType as R
from linkd.core.broker_config import (
    BROKER_KEYS,
    CLUSTER_DEFAULT,
    GROUP_KEYS,
    Alteration,
    AlterOp,
    ConfigSource,
    Described,
    describe_group_configs,
    describe_topic_configs,
    resolve_alterations,
)
from linkd.core.cluster import BROKER_ID
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.topic_config import CONFIG_KEYS, ConfigType
from linkd.kafka import authz
from linkd.kafka.codec import field
from linkd.kafka.context import Context, error_fields

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32


def _invalid(resource: str, message: str) -> ClusterError:
    return ClusterError(ErrorCode.INVALID_REQUEST, resource, message)


# -- topics -----------------------------------------------------------------------------


def _topic_configs(ctx: Context, name: str) -> list[dict[str, Any]]:
    state = ctx.node.state
    described = describe_topic_configs(
        state.topics[name].overrides, state.broker_configs, str(BROKER_ID)
    )
    return [
        {
            "name": d.name,
            "value": d.value,
            "read_only": d.read_only,
            "is_sensitive": False,
            "config_source": int(d.source),
        }
        for d in described
    ]


async def _create_topic(ctx: Context, t: Any, validate_only: bool) -> dict[str, Any]:
    name = t.name
    base = {
        "name": name,
        "topic_id": uuid.UUID(int=0),
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }
    try:
        if not authz.may_create_topic(ctx, name):
            raise authz.refusal(ctx, R.TOPIC, name, Op.CREATE) or AssertionError(name)
        broker = ctx.broker.node_id
        assignments = list(t.assignments or ())
        count = int(t.num_partitions)
        if assignments:
            if count != -1 or int(t.replication_factor) != -1:
                return {
                    **base,
                    "error_code": int(K.invalid_request),
                    "error_message": "give either replica assignments or a partition "
                    "count and replication factor, not both",
                }
            if any(list(a.broker_ids) != [broker] for a in assignments):
                return {
                    **base,
                    "error_code": int(K.invalid_replica_assignment),
                    "error_message": f"every partition must be assigned to broker "
                    f"{broker}, the cluster's only broker",
                }
            count = len(assignments)
        elif count == -1:
            count = ctx.num_partitions  # num.partitions, as Kafka's default
        replication = int(t.replication_factor)
        if replication not in (-1, 1):
            return {
                **base,
                "error_code": int(K.invalid_replication_factor),
                "error_message": f"replication factor {replication} is larger than the "
                "number of brokers (1)",
            }
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        if validate_only:
            ctx.node.check_create_topic(name, count, configs)
            return {
                **base,
                "error_code": 0,
                "error_message": None,
                "num_partitions": count,
                "replication_factor": 1,
            }
        await ctx.node.create_topic(name, count, configs)
    except ClusterError as exc:
        return {**base, **error_fields(exc)}
    topic = ctx.node.state.topics[name]
    shown = authz.topic_code(ctx, name, Op.DESCRIBE_CONFIGS)
    return {
        "name": name,
        "topic_id": topic.topic_id,
        "error_code": 0,
        "error_message": None,
        "topic_config_error_code": shown,
        "num_partitions": len(topic.partitions),
        "replication_factor": 1,
        "configs": None if shown else _topic_configs(ctx, name),
    }


async def create_topics(ctx: Context, req: Any) -> dict[str, Any]:
    validate_only = bool(field(req, "validate_only", False))
    return {
        "throttle_time": 0,
        "topics": [await _create_topic(ctx, t, validate_only) for t in req.topics],
    }


async def delete_topics(ctx: Context, req: Any) -> dict[str, Any]:
    state = ctx.node.state
    wanted: list[tuple[str | None, uuid.UUID | None]] = []
    topics = field(req, "topics")
    if topics is not None and ctx.api_version >= 6:
        for t in topics:
            wanted.append((t.name, t.topic_id))
    else:
        wanted = [(n, None) for n in req.topic_names]
    responses = []
    for name, topic_id in wanted:
        by_id = name is None and topic_id is not None and topic_id.int != 0
        if by_id:
            name = next(
                (t.name for t in state.topics.values() if t.topic_id == str(topic_id)), None
            )
            if name is None:
                responses.append(
                    {
                        "name": None,
                        "topic_id": topic_id,
                        "error_code": int(K.unknown_topic_id),
                        "error_message": f"no topic has id {topic_id}",
                    }
                )
                continue
        resolved = name or ""
        known = state.topics.get(resolved)
        result_id = uuid.UUID(known.topic_id) if known is not None else uuid.UUID(int=0)
        try:
            authz.check(ctx, R.TOPIC, resolved, Op.DELETE)
            await ctx.node.delete_topic(resolved)
        except ClusterError as exc:
            responses.append(
                {"name": resolved, "topic_id": result_id, **error_fields(exc, by_id=by_id)}
            )
            continue
        responses.append(
            {"name": resolved, "topic_id": result_id, "error_code": 0, "error_message": None}
        )
    return {"throttle_time": 0, "responses": responses}


async def create_partitions(ctx: Context, req: Any) -> dict[str, Any]:
    validate_only = bool(field(req, "validate_only", False))
    broker = ctx.broker.node_id
    results = []
    for t in req.topics:
        try:
            authz.check(ctx, R.TOPIC, t.name, Op.ALTER)
            for a in t.assignments or ():
                if list(a.broker_ids) != [broker]:
                    results.append(
                        {
                            "name": t.name,
                            "error_code": int(K.invalid_replica_assignment),
                            "error_message": f"new partitions must be assigned to "
                            f"broker {broker}, the only broker",
                        }
                    )
                    break
            else:
                if validate_only:
                    ctx.node.check_create_partitions(t.name, int(t.count))
                else:
                    await ctx.node.create_partitions(t.name, int(t.count))
                results.append({"name": t.name, "error_code": 0, "error_message": None})
        except ClusterError as exc:
            results.append({"name": t.name, **error_fields(exc)})
    return {"throttle_time": 0, "results": results}


# -- configs ------------------------------------------------------------------------------


def _entries(
    described: list[Described], keys: Any, synonyms: bool, docs: bool
) -> list[dict[str, Any]]:
    wanted = set(keys) if keys else None
    return [
        {
            "name": d.name,
            "value": d.value,
            "read_only": d.read_only,
            "is_default": d.is_default,
            "config_source": int(d.source),
            "is_sensitive": False,
            "synonyms": [
                {"name": name, "value": value, "source": int(source)}
                for name, value, source in d.synonyms
            ]
            if synonyms
            else [],
            "config_type": int(d.type),
            "documentation": d.doc if docs else None,
        }
        for d in described
        if wanted is None or d.name in wanted
    ]


def _static_broker_configs(ctx: Context) -> list[Described]:
    """The daemon's settings, read-only (those the core holds as dynamic
    configs are described with their levels instead)."""
    return [
        Described(name, value, ConfigSource.STATIC_BROKER_CONFIG, True, ConfigType(config_type),
                  "set when the daemon starts (linkd options); read-only",
                  ((name, value, ConfigSource.STATIC_BROKER_CONFIG),))
        for name, value, config_type in ctx.broker.configs
        if name not in BROKER_KEYS
    ]


def _described_broker(ctx: Context, name: str) -> list[Described]:
    brokers = ctx.node.state.broker_configs
    if name == CLUSTER_DEFAULT:
        # The cluster-wide default resource shows what is set at that level.
        level = brokers.level(CLUSTER_DEFAULT)
        return [
            Described(key, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False,
                      BROKER_KEYS[key].type, BROKER_KEYS[key].doc,
                      ((key, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),))
            for key, value in sorted(level.items())
        ]
    dynamic = [brokers.describe(key, name) for key in sorted(BROKER_KEYS)]
    return sorted([*_static_broker_configs(ctx), *dynamic], key=lambda d: d.name)


def _check_broker(ctx: Context, name: str) -> None:
    if name not in (CLUSTER_DEFAULT, str(ctx.broker.node_id)):
        raise _invalid(
            f"broker {name!r}",
            f"broker {name!r} does not exist; the cluster's only broker is "
            f"{ctx.broker.node_id} (or '' for the cluster-wide default)",
        )


async def describe_configs(ctx: Context, req: Any) -> dict[str, Any]:
    synonyms = bool(field(req, "include_synonyms", False))
    docs = bool(field(req, "include_documentation", False))
    state = ctx.node.state
    results = []
    for r in req.resources:
        base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            _check_config_resource(ctx, r, Op.DESCRIBE_CONFIGS)
            ctx.node.check_ready()
            if r.resource_type == RESOURCE_TOPIC:
                topic = state.topic(r.resource_name)
                described = describe_topic_configs(
                    topic.overrides, state.broker_configs, str(BROKER_ID)
                )
            elif r.resource_type == RESOURCE_BROKER:
                _check_broker(ctx, r.resource_name)
                described = _described_broker(ctx, r.resource_name)
            elif r.resource_type == RESOURCE_GROUP:
                described = describe_group_configs(state.group_configs.get(r.resource_name, {}))
            else:
                raise _invalid(
                    f"config resource type {r.resource_type}",
                    f"config resource type {r.resource_type} is not served (topics, "
                    "brokers and groups are)",
                )
            configs = _entries(described, r.configuration_keys, synonyms, docs)
        except ClusterError as exc:
            results.append({**base, **error_fields(exc), "configs": []})
            continue
        results.append({**base, "error_code": 0, "error_message": None, "configs": configs})
    return {"throttle_time": 0, "results": results}


# A config resource type -> the ACL resource type that guards it.
_CONFIG_ACL_RESOURCE = {
    RESOURCE_TOPIC: R.TOPIC,
    RESOURCE_BROKER: R.CLUSTER,
    RESOURCE_GROUP: R.GROUP,
}


def _check_config_resource(ctx: Context, resource: Any, op: int) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, the cluster (a broker
    resource) or the group; unknown types are refused later, as before."""
    acl_type = _CONFIG_ACL_RESOURCE.get(int(resource.resource_type))
    if acl_type is None:
        return
    name = CLUSTER_RESOURCE_NAME if acl_type == R.CLUSTER else resource.resource_name
    authz.check(ctx, acl_type, name, op)


def _alterations(resource: Any, incremental: bool) -> list[Alteration]:
    return [
        Alteration(AlterOp(int(c.config_operation)) if incremental else AlterOp.SET,
                   c.name, c.value)
        for c in resource.configs
    ]


def _topic_key(name: str) -> tuple[ConfigType, str | None] | None:
    key = CONFIG_KEYS.get(name)
    return None if key is None else (key.type, key.default)


def _broker_key(name: str) -> tuple[ConfigType, str | None] | None:
    key = BROKER_KEYS.get(name)
    return None if key is None else (key.type, key.default)


def _group_key(name: str) -> tuple[ConfigType, str | None] | None:
    key = GROUP_KEYS.get(name)
    return None if key is None else (key.type, key.default)


async def _alter_one(ctx: Context, r: Any, incremental: bool, validate_only: bool) -> None:
    node, state = ctx.node, ctx.node.state
    name, kind = r.resource_name, int(r.resource_type)
    replace = not incremental  # Kafka's AlterConfigs replaces the whole set
    alterations = _alterations(r, incremental)
    if kind == RESOURCE_TOPIC:
        current = state.topic(name).overrides
        set_, delete = resolve_alterations(f"topic {name!r}", current, alterations, _topic_key)
        if replace:
            delete = [k for k in current if k not in set_]
        if validate_only:
            node.check_alter_topic_configs(name, set_, delete)
        else:
            await node.alter_topic_configs(name, set_, delete)
        return
    if kind == RESOURCE_BROKER:
        _check_broker(ctx, name)
        level = state.broker_configs.level(name)
        set_, delete = resolve_alterations(f"broker {name!r}", level, alterations, _broker_key)
        if validate_only:
            node.check_broker_configs(name, set_, delete, replace=replace)
        else:
            await node.alter_broker_configs(name, set_, delete, replace=replace)
        return
    if kind == RESOURCE_GROUP:
        current = state.group_configs.get(name, {})
        set_, delete = resolve_alterations(f"group {name!r}", current, alterations, _group_key)
        if validate_only:
            node.check_group_configs(name, set_, delete, replace=replace)
        else:
            await node.alter_group_configs(name, set_, delete, replace=replace)
        return
    raise _invalid(
        f"config resource {name!r}",
        f"config resource type {kind} cannot be altered (topics, brokers and groups can)",
    )


async def _alter(ctx: Context, req: Any, incremental: bool) -> dict[str, Any]:
    validate_only = bool(field(req, "validate_only", False))
    responses = []
    for r in req.resources:
        base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            _check_config_resource(ctx, r, Op.ALTER_CONFIGS)
            await _alter_one(ctx, r, incremental, validate_only)
        except ClusterError as exc:
            responses.append({**base, **error_fields(exc)})
            continue
        responses.append({**base, "error_code": 0, "error_message": None})
    return {"throttle_time": 0, "responses": responses}


async def incremental_alter_configs(ctx: Context, req: Any) -> dict[str, Any]:
    return await _alter(ctx, req, incremental=True)


async def alter_configs(ctx: Context, req: Any) -> dict[str, Any]:
    return await _alter(ctx, req, incremental=False)


# -- ACLs ---------------------------------------------------------------------------------


def _filter(f: Any) -> AclFilter:
    return AclFilter(
        resource_type=int(f.resource_type_filter),
        resource_name=f.resource_name_filter,
        pattern_type=int(field(f, "pattern_type_filter", 3)),
        principal=f.principal_filter,
        host=f.host_filter,
        operation=int(f.operation),
        permission_type=int(f.permission_type),
    )


def _binding_fields(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": b.resource_type,
        "resource_name": b.resource_name,
        "pattern_type": b.pattern_type,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation,
        "permission_type": b.permission_type,
    }


async def describe_acls(ctx: Context, req: Any) -> dict[str, Any]:
    try:
        bindings = ctx.node.describe_acls(_filter(req))
    except ClusterError as exc:
        return {"throttle_time": 0, **error_fields(exc), "resources": []}
    grouped: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for b in bindings:
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            {
                "principal": b.principal,
                "host": b.host,
                "operation": b.operation,
                "permission_type": b.permission_type,
            }
        )
    return {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "resources": [
            {"resource_type": rt, "resource_name": rn, "pattern_type": pt, "acls": acls}
            for (rt, rn, pt), acls in grouped.items()
        ],
    }


async def create_acls(ctx: Context, req: Any) -> dict[str, Any]:
    bindings = [
        AclBinding(
            int(c.resource_type),
            c.resource_name,
            int(field(c, "resource_pattern_type", 3)),
            c.principal,
            c.host,
            int(c.operation),
            int(c.permission_type),
        )
        for c in req.creations
    ]
    try:
        results = await ctx.node.create_acls(bindings)
    except ClusterError as exc:
        return {"throttle_time": 0, "results": [error_fields(exc) for _ in bindings]}
    return {"throttle_time": 0, "results": [error_fields(r) for r in results]}


async def delete_acls(ctx: Context, req: Any) -> dict[str, Any]:
    filters = [_filter(f) for f in req.filters]
    try:
        results = await ctx.node.delete_acls(filters)
    except ClusterError as exc:
        return {
            "throttle_time": 0,
            "filter_results": [{**error_fields(exc), "matching_acls": []} for _ in filters],
        }
    out = []
    for r in results:
        if isinstance(r, ClusterError):
            out.append({**error_fields(r), "matching_acls": []})
        else:
            out.append(
                {
                    "error_code": 0,
                    "error_message": None,
                    "matching_acls": [
                        {"error_code": 0, "error_message": None, **_binding_fields(b)} for b in r
                    ],
                }
            )
    return {"throttle_time": 0, "filter_results": out}
