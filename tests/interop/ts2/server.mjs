#!/usr/bin/env node
// A real MCP 2026-07-28 server on the official TypeScript SDK 2.x
// (@modelcontextprotocol/server 2.4.0), for the interop tests: the same tools in every mode.
//
// Usage:
//   node server.mjs --mode reject    [--port N]  HTTP, createMcpHandler(factory, {legacy: 'reject'}):
//                                                modern-only; a 2025 `initialize` gets 400 -32022
//                                                with data.supported ["2026-07-28"]
//   node server.mjs --mode stateless [--port N]  HTTP, createMcpHandler(factory, {legacy: 'stateless'}):
//                                                dual; 2025 traffic is served too, statelessly (no
//                                                Mcp-Session-Id, no server-to-client requests)
//   node server.mjs --mode stdio [--legacy serve|reject]
//                                                stdio, serveStdio(factory): the first message pins
//                                                the era; `--legacy reject` refuses `initialize`
// Optional (HTTP): --port N (0, the default: a free one), --response-mode auto|sse|json (default auto).
//
// HTTP binds 127.0.0.1 only; the endpoint is /mcp, every other path answers 404. When it
// listens it prints ONE line to stdout:  {"url":"http://127.0.0.1:PORT/mcp","port":PORT,"mode":"reject"}
// Diagnostics go to stderr; on stdio, stdout carries nothing but JSON-RPC.
// Needs the pinned SDK from tests/interop/setup.sh ($INTEROP_TOOLS/ts2).
//
// Tools (one factory for every era and transport):
//   echo {msg}              -> text msg
//   ask {question?}         -> 2026-07-28: resultType "input_required", inputRequests.answer =
//                              elicitation/create (form {answer: string}), requestState "ask-round-1";
//                              the retry with inputResponses.answer = {action:"accept",content:{answer}}
//                              answers "you answered: <answer> (state=<requestState>)".
//                              2025 on stdio: the SDK turns the same return into a real
//                              elicitation/create request; 2025 on stateless HTTP: a tool error (isError)
//   sample {prompt?}        -> the same with inputRequests.llm = sampling/createMessage
//   roots {}                -> the same with inputRequests.roots = roots/list
//   slow {steps?,delayMs?}  -> notifications/progress per step (with a progressToken) and
//                              notifications/message logs (2026: only with _meta logLevel), then text
//   bump {lists?}           -> increments demo://counter, publishes notifications/resources/updated
//                              (lists: also tools/prompts/resources list_changed) to open
//                              subscriptions/listen streams (2026) or resources/subscribe-rs (2025, stdio)
//   long {ms?,ask?,fail?}   -> the tasks extension (io.modelcontextprotocol/tasks, hand-rolled: the SDK
//                              has no server API for it): with the extension in the request's
//                              clientCapabilities a CreateTaskResult (resultType "task"), run in the
//                              background; tasks/get, tasks/update and tasks/cancel serve it. ask: the task
//                              asks for input (status input_required, key confirm-1); fail: it fails
//                              (-32603). Without the extension it runs synchronously.
//   forecast {region, days?} -> SEP-2243 custom headers: inputSchema annotates region with
//                              "x-mcp-header": "Region" and days with "x-mcp-header": "Days"; on
//                              2026-07-28 HTTP the SDK refuses a call whose Mcp-Param-Region (or
//                              Mcp-Param-Days) is missing or disagrees with the body: 400, -32020
//   traceparent {}          -> text: this request's _meta.traceparent (SEP-414), or "none"
// Resource: demo://counter (subscribable, text = the counter). Prompt: greet {name}.
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { load } from './load.mjs';

const {
    McpServer,
    createMcpHandler,
    inputRequired,
    acceptedContent,
    inputResponse,
    ProtocolError,
    ProtocolErrorCode,
    MissingRequiredClientCapabilityError
} = await load('@modelcontextprotocol/server');
const { serveStdio } = await load('@modelcontextprotocol/server/stdio');
const { toNodeHandler } = await load('@modelcontextprotocol/node');
const z = await load('zod/v4');

// ---------- arguments ----------
const args = process.argv.slice(2);
function arg(name, fallback) {
    const i = args.indexOf(`--${name}`);
    return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
}
const mode = arg('mode', 'stateless');
const port = Number(arg('port', '0'));
const responseMode = arg('response-mode', 'auto');
const legacyStdio = arg('legacy', 'serve');
const HOST = '127.0.0.1';
if (!['reject', 'stateless', 'stdio'].includes(mode)) {
    console.error(`--mode must be reject|stateless|stdio (got ${mode})`);
    process.exit(2);
}
if (!['serve', 'reject'].includes(legacyStdio)) {
    console.error(`--legacy must be serve|reject (got ${legacyStdio})`);
    process.exit(2);
}
const log = (...a) => console.error(`[ts2 ${mode}]`, ...a);

// ---------- state shared across requests ----------
// createMcpHandler calls the factory once PER HTTP REQUEST, so what must outlive a request
// (the counter, the tasks) lives here.
const COUNTER_URI = 'demo://counter';
let counter = 0;
let publish = null; // HTTP: the handler's notifier (set below)
const TASKS_EXT = 'io.modelcontextprotocol/tasks';
// ctx.mcpReq.envelope is keyed by the full reserved _meta names.
const CLIENT_CAPS_KEY = 'io.modelcontextprotocol/clientCapabilities';
const tasks = new Map(); // taskId -> task record; bounded: finished tasks are dropped after TASK_TTL_MS
const TASK_TTL_MS = 10 * 60 * 1000;
const TASK_POLL_MS = 100;
const MAX_TASKS = 1000;

// DetailedTask (tasks extension, 2026-07-28).
function taskView(t) {
    const view = {
        taskId: t.taskId,
        status: t.status,
        createdAt: t.createdAt,
        lastUpdatedAt: t.lastUpdatedAt,
        ttlMs: t.ttlMs,
        pollIntervalMs: t.pollIntervalMs
    };
    if (t.statusMessage) view.statusMessage = t.statusMessage;
    if (t.status === 'input_required') view.inputRequests = t.inputRequests;
    if (t.status === 'completed') view.result = t.result;
    if (t.status === 'failed') view.error = t.error;
    return view;
}
function touch(t, patch) {
    Object.assign(t, patch, { lastUpdatedAt: new Date().toISOString() });
    log(`task ${t.taskId} -> ${t.status}`);
}
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
const terminal = status => ['completed', 'failed', 'cancelled'].includes(status);

async function runTask(t, { ms, ask, fail }) {
    await sleep(ms / 2);
    if (t.status === 'cancelled') return;
    if (ask) {
        touch(t, {
            status: 'input_required',
            statusMessage: 'waiting for confirmation',
            inputRequests: {
                'confirm-1': inputRequired.elicit({
                    message: 'Continue the long task?',
                    requestedSchema: {
                        type: 'object',
                        properties: { ok: { type: 'boolean', title: 'Continue?' } },
                        required: ['ok']
                    }
                })
            }
        });
        await new Promise(resolve => (t.resume = resolve));
        if (t.status === 'cancelled') return;
        touch(t, { status: 'working', statusMessage: 'resumed', inputRequests: undefined });
    }
    await sleep(ms / 2);
    if (t.status === 'cancelled') return;
    if (fail) {
        touch(t, { status: 'failed', statusMessage: 'failed on purpose', error: { code: -32603, message: 'failed on purpose' } });
        return;
    }
    touch(t, {
        status: 'completed',
        statusMessage: 'done',
        // ext-tasks 0.2.2 validates task.result with a schema that requires resultType.
        result: {
            resultType: 'complete',
            content: [{ type: 'text', text: `long task finished after ${ms}ms${t.answer ? ` (answer=${JSON.stringify(t.answer)})` : ''}` }],
            isError: false
        }
    });
}

function forgetOldTasks() {
    const now = Date.now();
    for (const [id, t] of tasks) {
        if (terminal(t.status) && now - Date.parse(t.lastUpdatedAt) > t.ttlMs) tasks.delete(id);
    }
}

// ---------- the factory ----------
function factory(ctx) {
    const mcp = new McpServer(
        { name: 'ts2-fixture', version: '2.4.0-fixture' },
        {
            capabilities: {
                tools: { listChanged: true },
                resources: { subscribe: true, listChanged: true },
                prompts: { listChanged: true },
                logging: {},
                extensions: { [TASKS_EXT]: {} }
            },
            instructions: 'Fixture server for proxy tests.'
        }
    );

    mcp.registerTool('echo', { description: 'Echo back msg', inputSchema: z.object({ msg: z.string() }) }, async ({ msg }) => ({
        content: [{ type: 'text', text: msg }]
    }));

    // SEP-414: the W3C trace context a client (or a proxy) put in the request's _meta.
    mcp.registerTool('traceparent', { description: "This request's _meta traceparent ('none' without one)" }, async ctx => ({
        content: [{ type: 'text', text: String(ctx.mcpReq._meta?.traceparent ?? 'none') }]
    }));

    const AnswerSchema = z.object({ answer: z.string() });
    mcp.registerTool(
        'ask',
        { description: 'Ask the user a question (elicitation)', inputSchema: z.object({ question: z.string().optional() }) },
        async ({ question }, ctx) => {
            const view = inputResponse(ctx.mcpReq.inputResponses, 'answer');
            const state = ctx.mcpReq.requestState();
            if (view.kind === 'elicit') {
                if (view.action !== 'accept') return { content: [{ type: 'text', text: `user ${view.action}ed` }] };
                const content = acceptedContent(ctx.mcpReq.inputResponses, 'answer', AnswerSchema);
                if (content) return { content: [{ type: 'text', text: `you answered: ${content.answer} (state=${state})` }] };
            }
            return inputRequired({
                inputRequests: {
                    answer: inputRequired.elicit({ message: question ?? 'What is your favourite colour?', requestedSchema: AnswerSchema })
                },
                requestState: 'ask-round-1'
            });
        }
    );

    mcp.registerTool(
        'sample',
        { description: "Ask the client's model (sampling)", inputSchema: z.object({ prompt: z.string().optional() }) },
        async ({ prompt }, ctx) => {
            const view = inputResponse(ctx.mcpReq.inputResponses, 'llm');
            if (view.kind === 'sampling') {
                const c = Array.isArray(view.result.content) ? view.result.content[0] : view.result.content;
                return { content: [{ type: 'text', text: `model ${view.result.model} said: ${c?.text ?? JSON.stringify(c)}` }] };
            }
            return inputRequired({
                inputRequests: {
                    llm: inputRequired.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: prompt ?? 'Say hi' } }], maxTokens: 50 })
                }
            });
        }
    );

    mcp.registerTool('roots', { description: "List the client's roots (roots/list)" }, async ctx => {
        const view = inputResponse(ctx.mcpReq.inputResponses, 'roots');
        if (view.kind === 'roots') return { content: [{ type: 'text', text: `roots: ${view.roots.map(r => r.uri).join(',')}` }] };
        return inputRequired({ inputRequests: { roots: inputRequired.listRoots() } });
    });

    mcp.registerTool(
        'slow',
        {
            description: 'Progress and log notifications, then an answer',
            inputSchema: z.object({ steps: z.number().int().optional(), delayMs: z.number().int().optional() })
        },
        async ({ steps = 3, delayMs = 200 }, ctx) => {
            const token = ctx.mcpReq._meta?.progressToken;
            for (let i = 1; i <= steps; i++) {
                await sleep(delayMs);
                if (ctx.mcpReq.signal.aborted) throw new Error('cancelled');
                if (token !== undefined) {
                    await ctx.mcpReq.notify({
                        method: 'notifications/progress',
                        params: { progressToken: token, progress: i, total: steps, message: `step ${i}/${steps}` }
                    });
                }
                await ctx.mcpReq.log(i === steps ? 'warning' : 'info', `slow step ${i}`, 'slow');
            }
            return { content: [{ type: 'text', text: `slow done after ${steps} steps` }] };
        }
    );

    mcp.registerTool(
        'bump',
        {
            description: 'Increment demo://counter and notify subscribers (lists: also the list_changed notifications)',
            inputSchema: z.object({ lists: z.boolean().optional() })
        },
        async ({ lists = false }) => {
            counter++;
            if (mode === 'stdio') {
                // serveStdio: the pinned instance's notifications reach open listens / 2025 subscribers.
                await mcp.server.sendResourceUpdated({ uri: COUNTER_URI });
                if (lists) {
                    mcp.sendToolListChanged();
                    mcp.sendPromptListChanged();
                    mcp.sendResourceListChanged();
                }
            } else {
                // createMcpHandler: instances live for one request; publish on the handler's bus.
                publish.resourceUpdated(COUNTER_URI);
                if (lists) {
                    publish.toolsChanged();
                    publish.promptsChanged();
                    publish.resourcesChanged();
                }
            }
            return { content: [{ type: 'text', text: `counter=${counter}` }] };
        }
    );

    mcp.registerTool(
        'long',
        {
            description: 'Long-running tool; a task of the tasks extension when the client declares it',
            inputSchema: z.object({ ms: z.number().int().optional(), ask: z.boolean().optional(), fail: z.boolean().optional() })
        },
        async ({ ms = 1000, ask = false, fail = false }, ctx) => {
            const caps = ctx.mcpReq.envelope?.[CLIENT_CAPS_KEY];
            if (caps?.extensions?.[TASKS_EXT] === undefined) {
                await sleep(ms);
                return { content: [{ type: 'text', text: `long (no task) finished after ${ms}ms` }] };
            }
            forgetOldTasks();
            if (tasks.size >= MAX_TASKS) throw new ProtocolError(ProtocolErrorCode.InternalError, 'too many tasks');
            const now = new Date().toISOString();
            const t = {
                taskId: randomUUID(),
                status: 'working',
                statusMessage: 'started',
                createdAt: now,
                lastUpdatedAt: now,
                ttlMs: TASK_TTL_MS,
                pollIntervalMs: TASK_POLL_MS
            };
            tasks.set(t.taskId, t);
            runTask(t, { ms, ask, fail }).catch(e => log('task error', e));
            // The SDK's tools/call wrapper validates against the 2026 CallToolResult schema, which
            // requires `content`: every CreateTaskResult it lets through carries `content: []`.
            return { resultType: 'task', ...taskView(t), content: [] };
        }
    );

    // SEP-2243: `x-mcp-header` on a property makes the client mirror its value into an
    // Mcp-Param-<Name> header; the SDK checks it before the handler runs (2026-07-28 HTTP only).
    mcp.registerTool(
        'forecast',
        {
            description: 'A forecast for a region (its arguments travel in Mcp-Param-Region and Mcp-Param-Days too)',
            inputSchema: z.object({
                region: z.string().meta({ 'x-mcp-header': 'Region' }),
                days: z.number().int().optional().meta({ 'x-mcp-header': 'Days' })
            })
        },
        async ({ region, days = 1 }) => ({ content: [{ type: 'text', text: `forecast for ${region}: sunny for ${days} day(s)` }] })
    );

    mcp.registerResource(
        'counter',
        COUNTER_URI,
        { title: 'Counter', mimeType: 'text/plain', description: 'Incremented by the bump tool' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: String(counter) }] })
    );

    mcp.registerPrompt('greet', { description: 'Greeting prompt', argsSchema: z.object({ name: z.string() }) }, ({ name }) => ({
        messages: [{ role: 'user', content: { type: 'text', text: `Say hello to ${name}` } }]
    }));

    // McpServer advertises resources.subscribe but registers no 2025 resources/subscribe
    // handler (it would answer -32601): register them on 2025-era instances (2026 has
    // subscriptions/listen instead).
    if (ctx?.era === 'legacy') {
        mcp.server.setRequestHandler('resources/subscribe', async () => ({}));
        mcp.server.setRequestHandler('resources/unsubscribe', async () => ({}));
    }

    // The tasks extension's methods: no SDK server support, so custom methods (the 3-argument
    // form lets `tasks/get` and `tasks/cancel` through the 2026 era gate).
    const TaskIdParams = z.looseObject({ taskId: z.string() });
    const requireTaskCap = ctx2 => {
        const caps = ctx2.mcpReq.envelope?.[CLIENT_CAPS_KEY];
        if (caps?.extensions?.[TASKS_EXT] === undefined)
            throw new MissingRequiredClientCapabilityError({ requiredCapabilities: { extensions: { [TASKS_EXT]: {} } } });
    };
    const getTask = id => {
        const t = tasks.get(id);
        if (!t) throw new ProtocolError(ProtocolErrorCode.InvalidParams, 'Failed to retrieve task: Task not found');
        return t;
    };
    mcp.server.setRequestHandler('tasks/get', { params: TaskIdParams }, async (params, ctx2) => {
        requireTaskCap(ctx2);
        return { ...taskView(getTask(params.taskId)) };
    });
    // The SDK lifts params.inputResponses out of every request: the handler finds them in
    // ctx.mcpReq.inputResponses.
    mcp.server.setRequestHandler('tasks/update', { params: TaskIdParams }, async (params, ctx2) => {
        requireTaskCap(ctx2);
        const t = getTask(params.taskId);
        const answer = (ctx2.mcpReq.inputResponses ?? {})['confirm-1'];
        if (t.status === 'input_required' && answer) {
            t.answer = answer;
            if (answer.action !== 'accept' || answer.content?.ok === false) touch(t, { status: 'cancelled', statusMessage: `user ${answer.action}` });
            t.resume?.();
        }
        return {};
    });
    mcp.server.setRequestHandler('tasks/cancel', { params: TaskIdParams }, async (params, ctx2) => {
        requireTaskCap(ctx2);
        const t = getTask(params.taskId);
        if (!terminal(t.status)) {
            touch(t, { status: 'cancelled', statusMessage: 'cancelled by client' });
            t.resume?.();
        }
        return {};
    });

    return mcp;
}

// ---------- serving ----------
if (mode === 'stdio') {
    const handle = serveStdio(factory, { legacy: legacyStdio, onerror: e => log('onerror', e?.message ?? e) });
    const stop = () => handle.close().finally(() => process.exit(0));
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
} else {
    const handler = createMcpHandler(factory, { legacy: mode, responseMode, onerror: e => log('onerror:', e?.message ?? e) });
    publish = handler.notify;
    const nodeHandler = toNodeHandler(handler, { onerror: e => log('node onerror:', e?.message ?? e) });
    const server = http.createServer((req, res) => {
        const path = new URL(req.url ?? '/', 'http://x').pathname;
        log(`${req.method} ${path} mcp-method=${req.headers['mcp-method'] ?? '-'} version=${req.headers['mcp-protocol-version'] ?? '-'}`);
        if (path !== '/mcp') {
            res.writeHead(404, { 'content-type': 'text/plain' });
            res.end('not found');
            return;
        }
        nodeHandler(req, res).catch(e => {
            log('handler crash', e);
            if (!res.headersSent) res.writeHead(500);
            res.end();
        });
    });
    server.listen(port, HOST, () => {
        const p = server.address().port;
        process.stdout.write(JSON.stringify({ url: `http://${HOST}:${p}/mcp`, port: p, mode }) + '\n');
    });
    const shutdown = () => {
        handler.close().finally(() => server.close(() => process.exit(0)));
        setTimeout(() => process.exit(0), 1000).unref();
    };
    process.on('SIGTERM', shutdown);
    process.on('SIGINT', shutdown);
}
