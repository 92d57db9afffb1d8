'use strict';
// walfeed: PostgreSQL change streams over gRPC, the Node.js client. See
// README.md; lib/subscriber.js (the loop, ack policies, reconnects),
// lib/values.js (typed values as JavaScript values), lib/ids.js (event ids).
module.exports = {
  ...require('./lib/subscriber'),
  ...require('./lib/values'),
  ...require('./lib/ids'),
  ...require('./lib/errors'),
  ...require('./lib/watermark'),
};
