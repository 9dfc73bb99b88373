#!/usr/bin/env node
// A real MCP client on the official TypeScript SDK 2.x (@modelcontextprotocol/client 2.4.0),
// for the interop tests: connects the way its --mode says, calls a few tools and prints one
// JSON line per step.
//
// Usage:
//   node client.mjs URL [options]                 Streamable HTTP (or --transport sse: the
//                                                 2024-11-05 HTTP+SSE transport, URL = its GET /sse)
//   node client.mjs stdio [options] -- CMD ARG... a stdio server started by the client
// Options:
//   --mode modern   versionNegotiation {mode: {pin: '2026-07-28'}}: server/discover, the
//                   per-request _meta envelope, no initialize
//          legacy   versionNegotiation 'legacy' (the SDK's default): the 2025-11-25 initialize
//          auto     versionNegotiation 'auto': probe with server/discover, fall back to initialize
//   --steps a,b,... the steps after connecting, in order (default echo,ask,slow):
//                   echo      echo {msg} (or {message}): passes when the text contains it
//                   ask       ask {question}: the server asks (input_required in 2026, a real
//                             elicitation/create in 2025); the client accepts, filling every
//                             property of the requested schema (strings "auto-answer", booleans
//                             true, numbers 1); passes when the text contains "auto-answer"
//                   sample    sample {prompt}: the client's "model" answers "fixture model reply"
//                   roots     roots {}: the client has one root, file:///tmp/fixture-root
//                   slow      slow {steps: 3, delay 100 ms} with a progress token and logLevel
//                             info: passes with at least 2 of the 3 progress notifications
//                   forecast  forecast {region: "north", days: 3}: the client mirrors both into
//                             Mcp-Param-Region / Mcp-Param-Days (SEP-2243)
//                   listen    (2026 only) subscriptions/listen on demo://counter, then bump: passes
//                             when notifications/resources/updated arrives
//   --header 'Name: value'   an extra HTTP header on every request (repeatable)
//   --timeout-ms N           give up after N ms in all (default 20000)
// Output, one JSON object per line on stdout:
//   {"step":"connect","ok":true,"era":"modern"|"legacy","protocolVersion":...,"server":{...},
//    "sessionId":...,"tools":[names]}   (or ok:false with error/code/data, and exit 1)
//   {"step":"<name>","ok":bool,"text":...,"isError":...,"error":...,...}
// Exit status 0 iff every step passed. A step naming a tool the server does not list fails.
// Needs the pinned SDK from tests/interop/setup.sh ($INTEROP_TOOLS/ts2).
import { load } from './load.mjs';

const { Client, StreamableHTTPClientTransport, SSEClientTransport } = await load('@modelcontextprotocol/client');
const { StdioClientTransport } = await load('@modelcontextprotocol/client/stdio');

// ---------- arguments ----------
const argv = process.argv.slice(2);
const dashdash = argv.indexOf('--');
const own = dashdash >= 0 ? argv.slice(0, dashdash) : argv;
const command = dashdash >= 0 ? argv.slice(dashdash + 1) : [];
const options = { mode: 'modern', transport: 'http', steps: 'echo,ask,slow', headers: {}, timeoutMs: 20000 };
let target;
for (let i = 0; i < own.length; i++) {
    const a = own[i];
    const value = () => {
        if (i + 1 >= own.length) usage(`${a} needs a value`);
        return own[++i];
    };
    if (a === '--mode') options.mode = value();
    else if (a === '--transport') options.transport = value();
    else if (a === '--steps') options.steps = value();
    else if (a === '--timeout-ms') options.timeoutMs = Number(value());
    else if (a === '--header') {
        const h = value();
        const colon = h.indexOf(':');
        if (colon <= 0) usage(`bad header ${h}`);
        options.headers[h.slice(0, colon).trim()] = h.slice(colon + 1).trim();
    } else if (!a.startsWith('--') && target === undefined) target = a;
    else usage(`unknown argument ${a}`);
}
function usage(why) {
    console.error(`client.mjs: ${why}\nusage: node client.mjs URL|stdio [--mode modern|legacy|auto] [--transport http|sse] [--steps a,b] [--header 'N: v'] [--timeout-ms N] [-- CMD ARG...]`);
    process.exit(2);
}
if (!target) usage('no URL');
if (!['modern', 'legacy', 'auto'].includes(options.mode)) usage(`bad --mode ${options.mode}`);
if (!['http', 'sse'].includes(options.transport)) usage(`bad --transport ${options.transport}`);
if (target === 'stdio' && command.length === 0) usage('stdio needs -- CMD ARG...');
const steps = options.steps.split(',').filter(Boolean);

let failures = 0;
const out = record => {
    if (!record.ok) failures++;
    process.stdout.write(JSON.stringify(record) + '\n');
};
const textOf = r => (Array.isArray(r?.content) ? r.content : []).filter(c => c.type === 'text').map(c => c.text).join('\n');
const describe = e => ({ error: e?.message ?? String(e), code: e?.code, data: e?.data });

// A hung peer must not hang the test: give up after --timeout-ms, saying where.
let current = 'connect';
setTimeout(() => {
    out({ step: current, ok: false, error: `timed out after ${options.timeoutMs} ms` });
    process.exit(1);
}, options.timeoutMs).unref();

// ---------- the client ----------
const versionNegotiation = options.mode === 'modern' ? { mode: { pin: '2026-07-28' } } : { mode: options.mode };
const client = new Client(
    { name: 'ts2-fixture-client', version: '1.0.0' },
    {
        capabilities: { elicitation: { form: {} }, sampling: {}, roots: { listChanged: false } },
        versionNegotiation,
        inputRequired: { autoFulfill: true, maxRounds: 5 }
    }
);
// The same handlers answer 2025 server-to-client requests and 2026 input_required requests.
const asked = { elicitation: 0, sampling: 0, roots: 0 };
client.setRequestHandler('elicitation/create', async request => {
    asked.elicitation++;
    const content = {};
    for (const [name, spec] of Object.entries(request.params?.requestedSchema?.properties ?? {})) {
        content[name] = spec.type === 'boolean' ? true : spec.type === 'number' || spec.type === 'integer' ? 1 : 'auto-answer';
    }
    return { action: 'accept', content };
});
client.setRequestHandler('sampling/createMessage', async () => {
    asked.sampling++;
    return { role: 'assistant', model: 'fixture-model', content: { type: 'text', text: 'fixture model reply' }, stopReason: 'endTurn' };
});
client.setRequestHandler('roots/list', async () => {
    asked.roots++;
    return { roots: [{ uri: 'file:///tmp/fixture-root', name: 'fixture-root' }] };
});
const logs = [];
client.setNotificationHandler('notifications/message', n => logs.push(n.params));
const updates = [];
client.setNotificationHandler('notifications/resources/updated', n => updates.push(n.params));
client.onerror = e => console.error(`[client] ${e?.message ?? e}`);

let transport;
if (target === 'stdio') {
    transport = new StdioClientTransport({ command: command[0], args: command.slice(1), stderr: 'inherit' });
} else if (options.transport === 'sse') {
    const headers = options.headers;
    transport = new SSEClientTransport(new URL(target), {
        requestInit: { headers },
        eventSourceInit: { fetch: (url, init) => fetch(url, { ...init, headers: { ...Object.fromEntries(new Headers(init?.headers)), ...headers } }) }
    });
} else {
    transport = new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: options.headers } });
}

try {
    await client.connect(transport);
} catch (e) {
    out({ step: 'connect', ok: false, mode: options.mode, ...describe(e) });
    process.exit(1);
}
const era = client.getProtocolEra();
let listed = [];
let listError;
try {
    listed = (await client.listTools()).tools ?? [];
} catch (e) {
    listError = describe(e);
}
out({
    step: 'connect',
    ok: listError === undefined,
    mode: options.mode,
    era,
    protocolVersion: client.getNegotiatedProtocolVersion(),
    server: client.getServerVersion(),
    sessionId: transport.sessionId,
    tools: listed.map(t => t.name),
    ...(listError && { listError })
});
const tools = new Map(listed.map(t => [t.name, t]));

async function call(name, args, extra = {}, callOptions = {}) {
    if (!tools.has(name)) throw new Error(`the server lists no tool ${name}`);
    return client.callTool({ name, arguments: args, ...extra }, callOptions);
}

const STEPS = {
    async echo() {
        // `msg` in these fixtures, `message` in the everything server.
        const props = Object.keys(tools.get('echo')?.inputSchema?.properties ?? {});
        const r = await call('echo', { [props.includes('message') ? 'message' : 'msg']: 'hello fixture' });
        return { ok: !r.isError && textOf(r).includes('hello fixture'), isError: r.isError ?? false, text: textOf(r) };
    },
    async ask() {
        const before = asked.elicitation;
        const r = await call('ask', { question: 'Favourite colour?' });
        return { ok: !r.isError && textOf(r).includes('auto-answer'), isError: r.isError ?? false, text: textOf(r), elicitations: asked.elicitation - before };
    },
    async sample() {
        const before = asked.sampling;
        const r = await call('sample', { prompt: 'Say hi' });
        return { ok: !r.isError && textOf(r).includes('fixture model reply'), isError: r.isError ?? false, text: textOf(r), samplings: asked.sampling - before };
    },
    async roots() {
        const before = asked.roots;
        const r = await call('roots', {});
        return { ok: !r.isError && textOf(r).includes('file:///tmp/fixture-root'), isError: r.isError ?? false, text: textOf(r), rootsRequests: asked.roots - before };
    },
    async slow() {
        // The argument names differ between fixtures (delayMs here, delay_ms in Python's).
        const props = Object.keys(tools.get('slow')?.inputSchema?.properties ?? {});
        const args = props.includes('delay_ms') ? { steps: 3, delay_ms: 100 } : { steps: 3, delayMs: 100 };
        const progress = [];
        const logsBefore = logs.length;
        const r = await call('slow', args, { _meta: { 'io.modelcontextprotocol/logLevel': 'info' } }, { onprogress: p => progress.push(p), resetTimeoutOnProgress: true });
        // At least 2 of 3: the SDK dispatches notifications on a microtask but responses at
        // once, so a last progress notification read together with the response is lost.
        return { ok: !r.isError && progress.length >= 2, isError: r.isError ?? false, text: textOf(r), progress: progress.length, logs: logs.length - logsBefore };
    },
    async forecast() {
        const r = await call('forecast', { region: 'north', days: 3 });
        return { ok: !r.isError && textOf(r).includes('north'), isError: r.isError ?? false, text: textOf(r) };
    },
    async listen() {
        if (era !== 'modern') return { ok: false, error: 'subscriptions/listen needs the 2026-07-28 era' };
        const sub = await client.listen({ resourceSubscriptions: ['demo://counter'] });
        const before = updates.length;
        const r = await call('bump', {});
        for (let i = 0; i < 40 && updates.length === before; i++) await new Promise(res => setTimeout(res, 50));
        const got = updates.slice(before);
        await sub.close();
        return { ok: got.some(u => u.uri === 'demo://counter'), honored: sub.honoredFilter, text: textOf(r), updates: got.length };
    }
};

for (const name of steps) {
    current = name;
    const run = STEPS[name];
    const started = Date.now();
    if (!run) {
        out({ step: name, ok: false, error: `no such step (known: ${Object.keys(STEPS).join(', ')})` });
        continue;
    }
    try {
        const result = await run();
        out({ step: name, ms: Date.now() - started, ...result });
    } catch (e) {
        out({ step: name, ok: false, ms: Date.now() - started, ...describe(e) });
    }
}

current = 'close';
await client.close().catch(e => console.error(`[client] close: ${e?.message ?? e}`));
process.exit(failures ? 1 : 0);
