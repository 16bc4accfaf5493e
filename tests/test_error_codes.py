"""linkd/core/errors.py mirrors the proto's ErrorCode enum exactly."""

from __future__ import annotations

from ccr.v1 import errors_pb2
from linkd.core.errors import ErrorCode


def test_core_error_codes_match_the_proto() -> None:
    proto = {v.name: v.number for v in errors_pb2.DESCRIPTOR.enum_types_by_name["ErrorCode"].values}
    # The proto's values carry the enum's name as prefix (ERROR_CODE_UNKNOWN_TOPIC).
    core = {"ERROR_CODE_UNSPECIFIED" if c.name == "ERROR_CODE_UNSPECIFIED" else
            f"ERROR_CODE_{c.name}": int(c) for c in ErrorCode}  # fmt: skip
    assert core == proto
