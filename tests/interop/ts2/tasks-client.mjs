#!/usr/bin/env node
// A real requester of the MCP tasks extension (io.modelcontextprotocol/tasks, 2026-07-28):
// @modelcontextprotocol/ext-tasks 0.2.2 on the TypeScript SDK 2.x client, driving server.mjs's
// `long` tool as a task from creation to its end, over Streamable HTTP.
//
// Usage: node tasks-client.mjs URL [--ms N] [--header 'Name: value']... [--timeout-ms N]
//
// Four executions, in order:
//   completed   long {ms}             -> CreateTaskResult, tasks/get polled until completed
//   input       long {ms, ask: true}  -> the task turns input_required (tasks/get shows
//                                        inputRequests.confirm-1); the requester answers with
//                                        tasks/update; the task completes
//   cancelled   long {ms: 5000}       -> tasks/cancel after 300 ms; the task ends cancelled
//   failed      long {ms, fail: true} -> the task ends failed (error -32603)
// Prints one JSON line per event: {"step":"connect",...}, {"step":<execution>,"phase":
// "created"|"event"|"input"|"settled",...}; a settled line has ok, status and, when completed,
// result. Exit status 0 iff every execution settled as expected.
//
// Why a rawDispatch: the SDK Client refuses resultType "task" and the tasks/* methods on a
// 2026-07-28 connection, so ext-tasks sends those itself through the host's raw JSON-RPC path
// (this file's rawDispatch: one POST with the standard headers, JSON or SSE answer), framed
// with the per-request _meta it is given (v2RequestFraming). Connecting (server/discover)
// still goes through the SDK Client.
import { load } from './load.mjs';

const { Client, StreamableHTTPClientTransport } = await load('@modelcontextprotocol/client');
const { createTaskSessionFromClient, resultFromTaskOutcome } = await load('@modelcontextprotocol/ext-tasks/client');

const argv = process.argv.slice(2);
const options = { ms: 600, headers: {}, timeoutMs: 30000 };
let url;
for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--ms') options.ms = Number(argv[++i]);
    else if (a === '--timeout-ms') options.timeoutMs = Number(argv[++i]);
    else if (a === '--header') {
        const h = argv[++i] ?? '';
        const colon = h.indexOf(':');
        if (colon <= 0) usage(`bad header ${h}`);
        options.headers[h.slice(0, colon).trim().toLowerCase()] = h.slice(colon + 1).trim();
    } else if (/^https?:/.test(a) && url === undefined) url = a;
    else usage(`unknown argument ${a}`);
}
function usage(why) {
    console.error(`tasks-client.mjs: ${why}\nusage: node tasks-client.mjs URL [--ms N] [--header 'N: v'] [--timeout-ms N]`);
    process.exit(2);
}
if (!url) usage('no URL');

const PROTOCOL_VERSION = '2026-07-28';
const clientInfo = { name: 'ts2-tasks-client', version: '1.0.0' };
const clientCapabilities = { elicitation: { form: {} }, extensions: { 'io.modelcontextprotocol/tasks': {} } };
let failures = 0;
const out = record => {
    if (record.ok === false) failures++;
    process.stdout.write(JSON.stringify(record) + '\n');
};
let current = 'connect';
setTimeout(() => {
    out({ step: current, ok: false, error: `timed out after ${options.timeoutMs} ms` });
    process.exit(1);
}, options.timeoutMs).unref();

const client = new Client(clientInfo, {
    capabilities: clientCapabilities,
    versionNegotiation: { mode: { pin: PROTOCOL_VERSION } }
});
try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: options.headers } }));
} catch (e) {
    out({ step: 'connect', ok: false, error: e?.message ?? String(e), code: e?.code });
    process.exit(1);
}
out({ step: 'connect', ok: true, era: client.getProtocolEra(), extensions: client.getServerCapabilities()?.extensions });

// One POST per request, with the 2026-07-28 standard headers. Header names are lower-cased
// before merging: ext-tasks passes {"Mcp-Name": taskId}; a second "mcp-name" beside it would
// make fetch send "Mcp-Name: id, id", which the server refuses (-32020).
let nextId = 1;
async function rawDispatch(request, dispatchOptions = {}) {
    const id = `raw-${nextId++}`;
    const headers = {
        ...options.headers,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': PROTOCOL_VERSION,
        'mcp-method': request.method
    };
    for (const [name, value] of Object.entries(dispatchOptions.context?.headers ?? {})) headers[name.toLowerCase()] = value;
    if (request.method === 'tools/call') headers['mcp-name'] = request.params.name;
    if (request.method.startsWith('tasks/')) headers['mcp-name'] = request.params.taskId;
    const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id, ...request }), signal: dispatchOptions.signal });
    let message;
    if ((res.headers.get('content-type') ?? '').includes('text/event-stream')) {
        // The response for this id; notifications in between (progress, logs) are skipped.
        for (const block of (await res.text()).split(/\r?\n\r?\n/)) {
            const data = block
                .split(/\r?\n/)
                .filter(line => line.startsWith('data:'))
                .map(line => line.slice(5).trimStart())
                .join('\n');
            if (!data) continue;
            const parsed = JSON.parse(data);
            if (parsed.id === id) message = parsed;
        }
    } else {
        message = await res.json().catch(() => undefined);
    }
    if (!message) throw new Error(`no JSON-RPC response for ${id} (HTTP ${res.status})`);
    return message.error ? { kind: 'error', error: message.error } : { kind: 'result', result: message.result };
}

const session = createTaskSessionFromClient(client, {
    endpointId: 'ts2-fixture',
    rawDispatch,
    v2RequestFraming: { protocolVersion: PROTOCOL_VERSION, clientInfo, clientCapabilities },
    // Answers both a request's input_required (delivery "request-retry") and a task's
    // input (delivery "task-update").
    onInputRequest: async (request, ctx) => {
        out({ step: current, phase: 'input', kind: request.kind, delivery: ctx.delivery, inputId: ctx.inputId, taskId: ctx.taskId });
        if (request.kind === 'elicitation') return { action: 'accept', content: { ok: true } };
        if (request.kind === 'sampling') return { role: 'assistant', model: 'fixture', content: { type: 'text', text: 'ok' } };
        return { roots: [] };
    },
    onError: e => console.error(`[tasks-client] ${e?.message ?? e}`)
});

async function run(step, args, expect) {
    current = step;
    const started = Date.now();
    try {
        const execution = await session.callTool('long', args);
        out({ step, phase: 'created', kind: execution.kind, taskId: execution.handle?.taskId });
        if (expect === 'cancelled') setTimeout(() => execution.cancel().catch(e => console.error(`[tasks-client] cancel: ${e?.message ?? e}`)), 300);
        const statuses = [];
        const { outcome } = await execution.settle({
            onEvent: ev => {
                const status = ev.type === 'task' ? ev.task.status : ev.outcome.status;
                if (statuses[statuses.length - 1] !== status) statuses.push(status);
            }
        });
        let result;
        let error;
        try {
            result = resultFromTaskOutcome(outcome);
        } catch (e) {
            error = { name: e?.name, message: e?.message, code: e?.code };
        }
        out({ step, phase: 'settled', ok: execution.kind === 'task' && outcome.status === expect, status: outcome.status, statuses, ms: Date.now() - started, result, error });
    } catch (e) {
        out({ step, phase: 'settled', ok: false, error: e?.message ?? String(e) });
    }
}

await run('completed', { ms: options.ms }, 'completed');
await run('input', { ms: options.ms, ask: true }, 'completed');
await run('cancelled', { ms: 5000 }, 'cancelled');
// As long as the others: a call that ends within the proxy's decision window (250 ms
// from when its upstream answered the head) is answered directly, not as a task, and half
// of 600 ms left a loaded machine only some 50 ms of margin.
await run('failed', { ms: options.ms, fail: true }, 'failed');

current = 'close';
await session.close();
await client.close();
process.exit(failures ? 1 : 0);
