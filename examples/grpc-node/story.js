// A client of the cluster's gRPC API in Node.js, built from the .proto files
// in proto/ alone (no generated code, no Python): what docs/grpc.md tells a
// developer of any language. Run: node examples/grpc-node/story.js A_ADDR B_ADDR
// (two linkd daemons, PLAINTEXT). It prints one JSON object of what it saw.
//
//  1. asks the standard health service of both daemons;
//  2. creates namespace orders- on both, a link from A to B (a refusal first:
//     no connection_direction) and attaches orders- with A leading;
//  3. creates a topic on A, produces one record batch and fetches it back;
//  4. waits until the link is FOLLOWING and fetches the same record on B;
//  5. produces to B's follower topic and decodes the refusal's ErrorDetail.
"use strict";

const path = require("path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");
const protobuf = require("protobufjs");

const PROTO = path.resolve(__dirname, "..", "..", "proto"); // the include root
const MIB_128 = 128 * 1024 * 1024; // the daemon's limit; grpc-js's default is 4 MiB
const CHANNEL_OPTIONS = {
  "grpc.max_receive_message_length": MIB_128,
  "grpc.max_send_message_length": MIB_128,
};
const LOAD_OPTIONS = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true };
const DEADLINE_MS = 30000;

// --- the contract ------------------------------------------------------------------
const definition = protoLoader.loadSync(
  ["ccr/v1/cluster.proto", "ccr/v1/admin.proto"], { ...LOAD_OPTIONS, includeDirs: [PROTO] });
const ccr = grpc.loadPackageDefinition(definition).ccr.v1;

// The standard health service (grpc/health/v1/health.proto, as every gRPC
// implementation ships it); its two messages written here.
const HEALTH_PROTO = `syntax = "proto3"; package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }`;
const healthRoot = protobuf.parse(HEALTH_PROTO, { keepCase: true }).root;
const health = grpc.loadPackageDefinition(
  protoLoader.fromJSON(healthRoot.toJSON(), LOAD_OPTIONS)).grpc.health.v1;

// A refusal's details: google.rpc.Status (shipped in proto/google/rpc/) in the
// trailer grpc-status-details-bin, holding a ccr.v1.ErrorDetail in an Any.
const errorsRoot = new protobuf.Root();
errorsRoot.resolvePath = (_origin, target) => path.join(PROTO, target);
errorsRoot.loadSync(["google/rpc/status.proto", "ccr/v1/errors.proto"], { keepCase: true });
const Status = errorsRoot.lookupType("google.rpc.Status");
const ErrorDetail = errorsRoot.lookupType("ccr.v1.ErrorDetail");

function errorDetail(err) {
  const [bytes] = err.metadata ? err.metadata.get("grpc-status-details-bin") : [];
  if (!bytes) return null;
  for (const any of Status.decode(bytes).details) {
    if (any.type_url === "type.googleapis.com/ccr.v1.ErrorDetail") {
      return ErrorDetail.toObject(ErrorDetail.decode(any.value), { enums: String });
    }
  }
  return null;
}

// --- Kafka record batches (magic 2), as Produce takes and Fetch returns them ------
const CRC32C = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return (buf) => {
    let c = 0xffffffff;
    for (const b of buf) c = table[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
})();

function varint(n) { // zigzag, as Kafka's records use
  let z = BigInt(n) >= 0n ? BigInt(n) << 1n : (-BigInt(n) << 1n) - 1n;
  const out = [];
  do {
    let byte = Number(z & 0x7fn);
    z >>= 7n;
    if (z > 0n) byte |= 0x80;
    out.push(byte);
  } while (z > 0n);
  return Buffer.from(out);
}

function readVarint(buf, at) {
  let z = 0n, shift = 0n, i = at;
  for (;;) {
    const b = buf[i++];
    z |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
    shift += 7n;
  }
  const n = z & 1n ? -((z + 1n) >> 1n) : z >> 1n;
  return [Number(n), i];
}

function buildBatch(values, timestampMs) {
  const records = values.map((value, i) => {
    const v = Buffer.from(value);
    const body = Buffer.concat([
      Buffer.from([0]), varint(0), varint(i), // attributes, timestamp delta, offset delta
      varint(-1), // no key
      varint(v.length), v, varint(0), // value, no headers
    ]);
    return Buffer.concat([varint(body.length), body]);
  });
  const head = Buffer.alloc(61);
  head.writeBigInt64BE(0n, 0); // base offset: the cluster assigns it
  head.writeInt32BE(-1, 12); // partition leader epoch: the cluster stamps it
  head.writeInt8(2, 16); // magic
  head.writeInt16BE(0, 21); // attributes: no compression, not transactional
  head.writeInt32BE(values.length - 1, 23); // last offset delta
  head.writeBigInt64BE(BigInt(timestampMs), 27); // base timestamp
  head.writeBigInt64BE(BigInt(timestampMs), 35); // max timestamp
  head.writeBigInt64BE(-1n, 43); // producer id: none (not idempotent)
  head.writeInt16BE(-1, 51); // producer epoch
  head.writeInt32BE(-1, 53); // base sequence
  head.writeInt32BE(values.length, 57); // record count
  const batch = Buffer.concat([head, ...records]);
  batch.writeInt32BE(batch.length - 12, 8); // batch length: after this field
  batch.writeUInt32BE(CRC32C(batch.subarray(21)), 17); // CRC32C of attributes..end
  return batch;
}

function readValues(buf) { // every record value of concatenated, uncompressed batches
  const out = [];
  for (let at = 0; at + 61 <= buf.length;) {
    const end = at + 12 + buf.readInt32BE(at + 8);
    if (buf.readUInt32BE(at + 17) !== CRC32C(buf.subarray(at + 21, end))) throw new Error("bad CRC");
    const isControl = (buf.readInt16BE(at + 21) & 0x20) !== 0;
    let i = at + 61;
    for (let r = buf.readInt32BE(at + 57); r > 0; r--) {
      let len, keyLen, valueLen;
      [len, i] = readVarint(buf, i);
      const next = i + len;
      i += 1; // attributes
      [, i] = readVarint(buf, i); // timestamp delta
      [, i] = readVarint(buf, i); // offset delta
      [keyLen, i] = readVarint(buf, i);
      i += Math.max(keyLen, 0);
      [valueLen, i] = readVarint(buf, i);
      if (!isControl) out.push(buf.subarray(i, i + valueLen).toString());
      i = next;
    }
    at = end;
  }
  return out;
}

// --- calls ---------------------------------------------------------------------------
function call(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + DEADLINE_MS }, (err, answer) =>
      err ? reject(err) : resolve(answer));
  });
}

async function refusal(promise) {
  try {
    await promise;
  } catch (err) {
    return { status: grpc.status[err.code], detail: errorDetail(err) };
  }
  throw new Error("the call was not refused");
}

async function until(what, check) {
  const deadline = Date.now() + 60000;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`not within 60 s: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function main([a, b]) {
  const creds = grpc.credentials.createInsecure();
  const [clusterA, clusterB] = [a, b].map((at) => new ccr.Cluster(at, creds, CHANNEL_OPTIONS));
  const [adminA, adminB] = [a, b].map((at) => new ccr.Admin(at, creds, CHANNEL_OPTIONS));
  const seen = {};

  seen.health = [];
  for (const at of [a, b]) {
    const probe = new health.Health(at, creds);
    seen.health.push((await call(probe, "Check", { service: "" })).status);
    probe.close();
  }

  const topics = { type: "RESOURCE_TYPE_TOPIC", prefix: "orders-" };
  await call(adminA, "CreateNamespace", topics);
  await call(adminB, "CreateNamespace", topics);
  seen.link_refused = await refusal(call(adminA, "CreateLink", { name: "ab", remote_bootstrap: b }));
  await call(adminA, "CreateLink",
    { name: "ab", remote_bootstrap: b, connection_direction: "CONNECTION_DIRECTION_LOCAL_DIALS" });
  await call(adminA, "AttachNamespace", {
    link: "ab", type: "RESOURCE_TYPE_TOPIC", local_prefix: "orders-", remote_prefix: "orders-",
    leader_side: "LEADER_SIDE_LOCAL",
  });

  await call(clusterA, "CreateTopic", { name: "orders-js", partitions: 1 });
  const batch = buildBatch(["hello from node", "second record"], Date.now());
  const produced = await call(clusterA, "Produce",
    { topic: "orders-js", partition: 0, batch, acks: -1 });
  seen.base_offset = Number(produced.base_offset);
  const fetch = { partitions: [{ topic: "orders-js", partition: 0, offset: 0, max_bytes: 1 << 20 }],
    max_wait_ms: 0, max_bytes: 1 << 20 };
  const fromA = (await call(clusterA, "Fetch", fetch)).partitions[0];
  seen.read_on_a = readValues(fromA.records);

  await until("orders-js on B and the link FOLLOWING", async () => {
    const link = await call(adminA, "DescribeLink", { name: "ab" });
    const fromB = (await call(clusterB, "Fetch", fetch)).partitions[0];
    seen.link_state = link.link_state;
    seen.read_on_b = fromB.error ? [] : readValues(fromB.records);
    return link.link_state === "LINK_STATE_FOLLOWING" && seen.read_on_b.length === 2;
  });

  seen.follower_write = await refusal(call(clusterB, "Produce",
    { topic: "orders-js", partition: 0, batch: buildBatch(["not here"], Date.now()) }));
  for (const c of [clusterA, clusterB, adminA, adminB]) c.close();
  process.stdout.write(JSON.stringify(seen) + "\n");
}

main(process.argv.slice(2)).catch((err) => {
  const detail = errorDetail(err);
  process.stderr.write(`${err.stack || err}${detail ? "\n" + JSON.stringify(detail) : ""}\n`);
  process.exit(1);
});
