'use strict';
// The walfeed.v1 API, loaded from its .proto at run time (nothing generated):
// from the package's own proto/ (copied in by `npm pack`), else from the
// repository's proto/, else from WALFEED_PROTO_DIR.
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

function protoDir() {
  if (process.env.WALFEED_PROTO_DIR) return process.env.WALFEED_PROTO_DIR;
  for (const dir of [path.join(__dirname, '..', 'proto'), path.join(__dirname, '..', '..', '..', 'proto')]) {
    if (fs.existsSync(path.join(dir, 'walfeed', 'v1', 'change_stream.proto'))) return dir;
  }
  throw new Error('walfeed: proto/walfeed/v1/change_stream.proto not found: set WALFEED_PROTO_DIR');
}

// keepCase: fields keep their proto names (new_values, session_id): without it
// proto-loader expects camelCase and silently drops snake_case request fields.
// oneofs: each message says which member it holds (`frame`, `value`).
// longs: String, so no 64-bit value loses precision (values.js converts).
const PROTO_DIR = protoDir();
const definition = protoLoader.loadSync('walfeed/v1/change_stream.proto', {
  includeDirs: [PROTO_DIR], keepCase: true, oneofs: true, longs: String, enums: String, defaults: true,
});
const { ChangeStream } = grpc.loadPackageDefinition(definition).walfeed.v1;

module.exports = { ChangeStream, PROTO_DIR };
