"""The standard gRPC services every daemon serves beside its own (docs/grpc.md).

- `grpc.health.v1.Health` (the `grpcio-health-checking` servicer): the
  overall status ("") and each of the daemon's services answer NOT_SERVING
  from the moment the listener opens until recovery at start is done (the
  node is ready and the links run), SERVING from then on, and NOT_SERVING
  again from the moment the daemon starts to stop: a load balancer or a
  Kubernetes gRPC probe stops sending calls before the daemon refuses them.
- Server reflection (`grpcio-reflection`), under both names clients ask:
  `grpc.reflection.v1.ServerReflection` (grpcurl, grpcui, Postman) and
  `grpc.reflection.v1alpha.ServerReflection` (older clients). It answers the
  list of services and the descriptors of the files that define them, which
  are the .proto files published in proto/ (and the standard services'):
  the schema, never data, settings or credentials. `linkd --grpc-reflection
  off` leaves it out.

Both answer without credentials, also on SASL listeners: the SASL
interceptor guards only the client services (linkd/grpc_auth.py).

grpcio-reflection ships only the v1alpha messages. The v1 service is the same
protocol under another package name (its messages have the same fields and
numbers), so the v1 method decodes and encodes with the v1alpha messages,
and a v1 descriptor, the v1alpha one renamed, is added to the descriptor pool
so that reflection describes itself under both names.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha_pb2
from grpc_reflection.v1alpha import reflection_pb2_grpc as v1alpha_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer

HEALTH_SERVICE = "grpc.health.v1.Health"
REFLECTION_V1ALPHA = "grpc.reflection.v1alpha.ServerReflection"
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
_V1ALPHA_PACKAGE = "grpc.reflection.v1alpha"
_V1_PACKAGE = "grpc.reflection.v1"
_V1_FILE = "grpc/reflection/v1/reflection.proto"
_METHOD = "ServerReflectionInfo"

if TYPE_CHECKING:  # grpc's classes are generic in its stubs only
    _StreamHandler = grpc.RpcMethodHandler[Any, Any]
else:
    _StreamHandler = grpc.RpcMethodHandler


class Health:
    """The standard health service of one daemon, following its life cycle."""

    def __init__(self, services: Sequence[str]) -> None:
        self.services = ("", *services)
        self.servicer = HealthServicer()
        # The servicer starts with "" SERVING: `starting` corrects it.
        self.status = health_pb2.HealthCheckResponse.SERVING

    async def starting(self, server: aio.Server) -> None:
        """Serves health on `server`, NOT_SERVING until `serving` is called."""
        await self._set_all(health_pb2.HealthCheckResponse.NOT_SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)

    async def serving(self) -> None:
        """Recovery at start is done: every service answers SERVING."""
        await self._set_all(health_pb2.HealthCheckResponse.SERVING)

    async def stopping(self) -> None:
        """The daemon stops: NOT_SERVING for good (later sets are ignored)."""
        self.status = health_pb2.HealthCheckResponse.NOT_SERVING
        await self.servicer.enter_graceful_shutdown()

    async def _set_all(self, status: health_pb2.HealthCheckResponse.ServingStatus) -> None:
        self.status = status
        for service in self.services:
            await self.servicer.set(service, status)


def _v1_file() -> descriptor_pb2.FileDescriptorProto:
    """The v1alpha reflection file under the v1 package (same messages)."""
    proto = descriptor_pb2.FileDescriptorProto()
    v1alpha_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = _V1_FILE
    proto.package = _V1_PACKAGE
    old, new = f".{_V1ALPHA_PACKAGE}.", f".{_V1_PACKAGE}."
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = new + field.type_name[len(old) :]
    for service in proto.service:
        for method in service.method:
            method.input_type = new + method.input_type[len(old) :]
            method.output_type = new + method.output_type[len(old) :]
    return proto


def _register_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    try:
        pool.FindFileByName(_V1_FILE)
    except KeyError:
        pool.Add(_v1_file())


def add_reflection(server: aio.Server, services: Sequence[str]) -> None:
    """Serves reflection v1 and v1alpha, listing `services` and itself."""
    pool = descriptor_pool.Default()
    _register_v1_descriptor(pool)
    names = [*services, REFLECTION_V1, REFLECTION_V1ALPHA]
    servicer = ReflectionServicer(names, pool=pool)
    v1alpha_grpc.add_ServerReflectionServicer_to_server(servicer, server)

    async def v1(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        async for answer in servicer.ServerReflectionInfo(requests, context):
            yield answer

    handler: _StreamHandler = grpc.stream_stream_rpc_method_handler(
        v1,
        request_deserializer=v1alpha_pb2.ServerReflectionRequest.FromString,
        response_serializer=v1alpha_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(REFLECTION_V1, {_METHOD: handler}),)
    )
