"""The linkd daemon and its pure core.

gRPC's C core logs every failed TLS handshake on stderr at INFO, outside the
daemon's JSON log lines; unless GRPC_VERBOSITY is set, it is set to ERROR
before gRPC loads (the daemon logs refusals itself, bounded).
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
