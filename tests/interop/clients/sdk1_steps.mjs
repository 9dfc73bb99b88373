// A real MCP 2025-11-25 client (the official TypeScript SDK 1.x) that runs a few steps
// against any of the interop fixtures and prints one JSON line per step, the same format
// as tests/interop/ts2/client.mjs, for the era matrix (tests/suite/eras.rs).
//
// Usage: node sdk1_steps.mjs URL [--steps echo,ask,slow]
//   (env MCP_SDK_NODE_MODULES: a node_modules folder holding @modelcontextprotocol/sdk)
// Steps (default echo,ask,slow), each on the fixture's own tool of that name:
//   echo   echo {msg} (or {message}): passes when the text contains "hello fixture"
//   ask    ask {question}: the server asks with elicitation/create; the client accepts,
//          setting every string property of the requested schema to "auto-answer"
//   slow   slow {steps: 3, delay 100 ms} with onprogress: passes with 3 progress
//          notifications
// Output: {"step":"connect","ok":true,"protocolVersion":...,"sessionId":...,"server":...,
// "tools":[...]}, then {"step":<name>,"ok":bool,...} per step; exit 0 iff every step passed.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.MCP_SDK_NODE_MODULES;
if (!modules) throw new Error('MCP_SDK_NODE_MODULES is not set');
const load = p => import(pathToFileURL(path.join(modules, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await load('client/index.js');
const { StreamableHTTPClientTransport } = await load('client/streamableHttp.js');
const { ElicitRequestSchema } = await load('types.js');

const args = process.argv.slice(2);
if (!args[0] || args[0].startsWith('--')) {
    console.error('usage: node sdk1_steps.mjs URL [--steps echo,ask,slow]');
    process.exit(2);
}
const stepsAt = args.indexOf('--steps');
const steps = (stepsAt > 0 ? args[stepsAt + 1] : 'echo,ask,slow').split(',').filter(Boolean);

let failures = 0;
const out = record => {
    if (!record.ok) failures++;
    process.stdout.write(JSON.stringify(record) + '\n');
};
const textOf = r => (r?.content ?? []).filter(c => c.type === 'text').map(c => c.text).join('\n');
const describe = e => ({ error: e?.message ?? String(e), code: e?.code, data: e?.data });
setTimeout(() => {
    out({ step: 'timeout', ok: false, error: 'gave up after 30 s' });
    process.exit(1);
}, 30000).unref();

const client = new Client({ name: 'ts-sdk1-steps', version: '1.0.0' }, { capabilities: { elicitation: {} } });
let elicitations = 0;
client.setRequestHandler(ElicitRequestSchema, async request => {
    elicitations++;
    const content = {};
    for (const [name, spec] of Object.entries(request.params?.requestedSchema?.properties ?? {})) {
        content[name] = spec.type === 'boolean' ? true : spec.type === 'number' || spec.type === 'integer' ? 1 : 'auto-answer';
    }
    return { action: 'accept', content };
});
const transport = new StreamableHTTPClientTransport(new URL(args[0]));
let tools;
try {
    await client.connect(transport);
    tools = new Map((await client.listTools()).tools.map(t => [t.name, t]));
} catch (e) {
    out({ step: 'connect', ok: false, ...describe(e) });
    process.exit(1);
}
out({
    step: 'connect',
    ok: true,
    era: 'legacy',
    protocolVersion: transport.protocolVersion,
    sessionId: transport.sessionId,
    server: client.getServerVersion()?.name,
    tools: [...tools.keys()].sort()
});
const props = name => Object.keys(tools.get(name)?.inputSchema?.properties ?? {});

const STEPS = {
    async echo() {
        const r = await client.callTool({ name: 'echo', arguments: { [props('echo').includes('message') ? 'message' : 'msg']: 'hello fixture' } });
        return { ok: !r.isError && textOf(r).includes('hello fixture'), isError: r.isError ?? false, text: textOf(r) };
    },
    async ask() {
        const before = elicitations;
        const r = await client.callTool({ name: 'ask', arguments: { question: 'Favourite colour?' } });
        return { ok: !r.isError && textOf(r).includes('auto-answer'), isError: r.isError ?? false, text: textOf(r), elicitations: elicitations - before };
    },
    async slow() {
        const delay = props('slow').includes('delay_ms') ? 'delay_ms' : 'delayMs';
        const progress = [];
        const r = await client.callTool({ name: 'slow', arguments: { steps: 3, [delay]: 100 } }, undefined, {
            onprogress: p => progress.push(p.progress)
        });
        return { ok: !r.isError && progress.length === 3, isError: r.isError ?? false, text: textOf(r), progress: progress.length };
    }
};

for (const name of steps) {
    if (!STEPS[name]) {
        out({ step: name, ok: false, error: `no such step (known: ${Object.keys(STEPS).join(', ')})` });
    } else if (!tools.has(name)) {
        out({ step: name, ok: false, error: `the server lists no tool ${name}` });
    } else {
        try {
            out({ step: name, ...(await STEPS[name]()) });
        } catch (e) {
            out({ step: name, ok: false, ...describe(e) });
        }
    }
}
await transport.terminateSession().catch(() => {});
await client.close().catch(() => {});
process.exit(failures ? 1 : 0);
