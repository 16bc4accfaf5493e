"""The contract in proto/ as clients of other languages meet it: every field a
client sets is explained, every file says where other generators put its
code, and the google.rpc.Status shipped beside it is the standard one."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from google.rpc import status_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO = ROOT / "proto"
CLIENT_SERVICES = ("Cluster", "Admin")
FILE_OPTIONS = ("go_package", "java_package", "java_multiple_files", "java_outer_classname",
                "csharp_namespace")  # fmt: skip
Files = dict[str, descriptor_pb2.FileDescriptorProto]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    """Every .proto file of proto/, with its comments (source info)."""
    out = tmp_path_factory.mktemp("descriptors") / "set.pb"
    sources = sorted(str(p.relative_to(PROTO)) for p in PROTO.rglob("*.proto")
                     if "gen" not in p.relative_to(PROTO).parts)  # fmt: skip
    include = Path(protoc.__file__).parent / "_proto"
    code = protoc.main(["protoc", f"-I{PROTO}", f"-I{include}", "--include_source_info",
                        "--include_imports", f"--descriptor_set_out={out}", *sources])  # fmt: skip
    assert code == 0
    found = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return {f.name: f for f in found.file}


def _client_fields(files: Files) -> list[str]:
    """Fields of every message a client sends (requests and what they hold)
    that have no comment, as "file: Message.field"."""
    messages: dict[str, tuple[str, int, descriptor_pb2.DescriptorProto]] = {}
    for f in files.values():
        for i, m in enumerate(f.message_type):
            messages[f".{f.package}.{m.name}"] = (f.name, i, m)
    todo = [method.input_type for f in files.values() for s in f.service
            if s.name in CLIENT_SERVICES for method in s.method]  # fmt: skip
    seen: set[str] = set()
    bare = []
    while todo:
        name = todo.pop()
        if name in seen or name not in messages:
            continue
        seen.add(name)
        file_name, index, message = messages[name]
        where = {tuple(loc.path): loc for loc in files[file_name].source_code_info.location}
        for j, field in enumerate(message.field):
            todo.append(field.type_name)
            loc = where.get((4, index, 2, j))  # message_type[index].field[j]
            if loc is None or not (loc.leading_comments.strip() or loc.trailing_comments.strip()):
                bare.append(f"{file_name}: {message.name}.{field.name}")
    assert len(seen) > 40  # the walk reached the requests and what they hold
    return bare


def test_every_field_a_client_sets_has_a_comment(
    files: Files,
) -> None:
    assert _client_fields(files) == []


def test_every_file_names_its_code_for_other_generators(
    files: Files,
) -> None:
    ours = [f for name, f in files.items() if name.startswith("ccr/")]
    assert len(ours) == 4
    for f in ours:
        options = f.options
        missing = [o for o in FILE_OPTIONS if not options.HasField(o)]
        assert missing == [], f"{f.name} lacks {missing}"
        assert options.java_multiple_files
    # One package per language for the four files.
    assert len({f.options.go_package for f in ours}) == 1
    assert len({f.options.java_package for f in ours}) == 1


def test_the_shipped_status_is_google_rpc_status(
    files: Files,
) -> None:
    [shipped] = [m for m in files["google/rpc/status.proto"].message_type if m.name == "Status"]
    standard = descriptor_pb2.DescriptorProto()
    status_pb2.Status.DESCRIPTOR.CopyToProto(standard)
    assert files["google/rpc/status.proto"].package == "google.rpc"
    assert [(f.name, f.number, f.type, f.label, f.type_name) for f in shipped.field] == [
        (f.name, f.number, f.type, f.label, f.type_name) for f in standard.field]


# The RPCs that answer with the resource they act on (buf.yaml's exception to
# RPC_RESPONSE_STANDARD_NAME and RPC_REQUEST_RESPONSE_UNIQUE, with the reason).
RESOURCE_ANSWERS = {
    "Cluster.CreateTopic": "TopicDescription",
    "Cluster.DescribeTopic": "TopicDescription",
    "Cluster.AlterTopicConfigs": "TopicDescription",
    "Cluster.CreatePartitions": "TopicDescription",
    "Admin.CreateNamespace": "Namespace",
    "Admin.CreateLink": "LinkDescription",
    "Admin.AlterLink": "LinkDescription",
    "Admin.ResumePartition": "LinkDescription",
    "Admin.DescribeLink": "LinkDescription",
    "Admin.AttachNamespace": "LinkDescription",
    "Admin.DetachNamespace": "LinkDescription",
    "Admin.SetLinkMode": "LinkDescription",
    "Admin.CreateMirrorLink": "MirrorLinkDescription",
}


def test_only_the_documented_rpcs_answer_with_a_resource(files: Files) -> None:
    odd = {}
    for f in files.values():
        for service in f.service:
            for method in service.method:
                request = method.input_type.rsplit(".", 1)[1]
                answer = method.output_type.rsplit(".", 1)[1]
                assert request == f"{method.name}Request", f"{service.name}.{method.name}"
                if answer != f"{method.name}Response":
                    odd[f"{service.name}.{method.name}"] = answer
    assert odd == RESOURCE_ANSWERS


def test_every_core_state_has_its_enum_value_on_the_wire() -> None:
    """The enums beside the deprecated strings name every state the core has."""
    from ccr.v1 import admin_pb2, cluster_pb2
    from linkd.core.groups import GroupState
    from linkd.core.links import LinkState

    assert sorted(f"LINK_STATE_{s.name}" for s in LinkState) == sorted(
        n for n in admin_pb2.LinkState.keys() if n != "LINK_STATE_UNSPECIFIED")
    assert sorted(f"GROUP_STATE_{s.name}" for s in GroupState) == sorted(
        n for n in cluster_pb2.GroupState.keys() if n != "GROUP_STATE_UNSPECIFIED")
