// Preload for the MCP "everything" reference server (or any Node program):
//
//   node --require tests/interop/everything-loopback.cjs \
//        target/interop-tools/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js \
//        streamableHttp
//
// It patches net.Server.prototype.listen (http.Server inherits it) so that every
// TCP listen binds 127.0.0.1 only, whatever host the program asked for (the
// everything server calls express' app.listen(PORT), which would bind all
// interfaces). Unix-socket / handle listens are left alone.
//
// Once a patched server is listening it prints one line to stdout:
//   READY <port>
// with the real port, so PORT=0 (ephemeral port) can be used and the port read
// back from that line.
"use strict";

const net = require("net");

const LOOPBACK = "127.0.0.1";
const origListen = net.Server.prototype.listen;

function isPortLike(v) {
  return (
    typeof v === "number" ||
    (typeof v === "string" && v !== "" && /^\d+$/.test(v))
  );
}

net.Server.prototype.listen = function patchedListen(...args) {
  let options = null;
  let cb;
  if (args.length > 0 && typeof args[args.length - 1] === "function") {
    cb = args.pop();
  }
  const first = args[0];
  if (first === undefined || first === null || isPortLike(first)) {
    // listen([port[, host[, backlog]]][, cb])
    options = { port: first === undefined || first === null ? 0 : Number(first) };
    // args[1] is host (string) or backlog (number) in the legacy signature
    if (typeof args[1] === "number") options.backlog = args[1];
    else if (typeof args[2] === "number") options.backlog = args[2];
  } else if (
    typeof first === "object" &&
    first.path === undefined &&
    first.fd === undefined &&
    first._handle === undefined &&
    first.handle === undefined
  ) {
    // listen(options[, cb]) with a TCP port
    options = Object.assign({}, first);
    if (options.port !== undefined && options.port !== null) {
      options.port = Number(options.port);
    }
  }
  if (options === null) {
    // unix socket path, handle or fd: not a TCP bind, leave it alone
    if (cb) args.push(cb);
    return origListen.apply(this, args);
  }
  options.host = LOOPBACK;
  delete options.ipv6Only;
  this.once("listening", () => {
    const addr = this.address();
    if (addr && typeof addr === "object") {
      process.stdout.write(`READY ${addr.port}\n`);
    }
  });
  return cb ? origListen.call(this, options, cb) : origListen.call(this, options);
};
