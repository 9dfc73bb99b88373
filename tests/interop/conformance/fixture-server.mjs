#!/usr/bin/env node
// Conformance fixture: a legacy MCP 2025-11-25 server (initialize + Mcp-Session-Id,
// Streamable HTTP, one McpServer per session) that offers every tool, prompt and
// resource the conformance suite's SERVER scenarios call, for both
// `--spec-version 2025-11-25` (suite 0.1.16) and `--spec-version 2026-07-28`
// (suite 0.2.0-alpha.12, run through the proxy, which reaches this server only
// through `initialize`). See README.md beside this file for the full contract.
//
// Usage:  node fixture-server.mjs [PORT] [--host 127.0.0.1] [--json-response]
//         PORT (argv or env PORT; 0 = ephemeral, default 0). Endpoint: /mcp.
// Prints `READY <port>` on stdout once listening; nothing else goes to stdout.
// Runs on Node 20 and 22. Loads the pinned TypeScript SDK (1.32.2) from
// $INTEROP_TOOLS/sdk (default <repo>/target/interop-tools/sdk), installed by
// tests/interop/setup.sh.

import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';

const HERE = dirname(fileURLToPath(import.meta.url));
const TOOLS = process.env.INTEROP_TOOLS || resolve(HERE, '..', '..', '..', 'target', 'interop-tools');
const SDK_DIR = join(TOOLS, 'sdk');
if (!existsSync(join(SDK_DIR, 'node_modules', '@modelcontextprotocol', 'sdk'))) {
  process.stderr.write(`fixture: MCP SDK not found under ${SDK_DIR} (run tests/interop/setup.sh)\n`);
  process.exit(2);
}
// CommonJS builds of the SDK and zod, resolved from the pinned install.
const requireSdk = createRequire(join(SDK_DIR, 'package.json'));
const { McpServer, ResourceTemplate } = requireSdk('@modelcontextprotocol/sdk/server/mcp.js');
const { StreamableHTTPServerTransport } = requireSdk('@modelcontextprotocol/sdk/server/streamableHttp.js');
const {
  CompleteRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  ElicitResultSchema,
  CreateMessageResultSchema,
  ListRootsResultSchema,
  McpError,
} = requireSdk('@modelcontextprotocol/sdk/types.js');
const { z } = requireSdk('zod');

// ---------------------------------------------------------------- arguments
const argv = process.argv.slice(2);
let port = Number(process.env.PORT ?? 0);
let host = '127.0.0.1';
let jsonResponse = false;
// --input-key-hints: tag each server-to-client request with the proxy's optional
// `_meta["mcp-session-proxy/inputKey"]` extension (see INPUT_KEY). Off by default: the
// conformance tests run this fixture as a plain 2025-11-25 server, which knows nothing of
// the proxy.
let inputKeyHints = false;
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '--json-response') jsonResponse = true;
  else if (a === '--input-key-hints') inputKeyHints = true;
  else if (a === '--host') host = argv[++i];
  else if (a === '--port') port = Number(argv[++i]);
  else if (/^\d+$/.test(a)) port = Number(a);
  else {
    process.stderr.write(`fixture: unknown argument ${a}\n`);
    process.exit(2);
  }
}

// ---------------------------------------------------------------- constants
const SERVER_INFO = { name: 'mcp-session-proxy-conformance-fixture', version: '1.0.0' };
// 1x1 red PNG and a minimal WAV (same bytes as the suite's reference server).
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';
// With --input-key-hints, the key hint on every server-to-client request this fixture
// sends: the key the 2026-07-28 suite expects in InputRequiredResult.inputRequests (the
// proxy, which turns upstream requests into inputRequests, uses it instead of a key of
// its own). A legacy server has no way to choose those keys otherwise.
const INPUT_KEY = 'mcp-session-proxy/inputKey';
const LOGGER = 'conformance-fixture';

// JSON Schema 2020-12 inputSchema of json_schema_2020_12_tool, exactly as the
// json-schema-2020-12 scenario (SEP-1613, SEP-2106) expects it in tools/list.
const JSON_SCHEMA_2020_12 = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  $defs: {
    address: {
      $anchor: 'addressDef',
      type: 'object',
      properties: { street: { type: 'string' }, city: { type: 'string' } },
    },
  },
  properties: {
    name: { type: 'string' },
    address: { $ref: '#/$defs/address' },
    contactMethod: { type: 'string', enum: ['phone', 'email'] },
    phone: { type: 'string' },
    email: { type: 'string' },
  },
  allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
  if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
  then: { required: ['phone'] },
  else: { required: ['email'] },
  additionalProperties: false,
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (t) => ({ content: [{ type: 'text', text: t }] });
// A sleep that ends early, rejecting, when `signal` aborts (the client cancelled the
// tools/call with notifications/cancelled): a cancelled tool stops at once. The SDK
// then sends no response for the cancelled request.
const sleepUnless = (ms, signal) =>
  new Promise((resolveSleep, reject) => {
    if (signal?.aborted) return reject(new Error('cancelled'));
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolveSleep();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(new Error('cancelled'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

// Tasks tools (see "tasks" below): the 2025-11-25 `execution.taskSupport` each one
// declares in tools/list. They are registered as plain tools (the SDK's own
// `taskSupport: "forbidden"`, so a call runs as an ordinary 2025-11-25 tools/call and
// never needs `params.task`); only their tools/list entries are patched.
const TASK_SUPPORT = {
  slow_compute: 'optional',
  failing_job: 'required',
  protocol_error_job: 'optional',
  confirm_delete: 'optional',
  multi_input: 'optional',
  test_tool_with_task: 'required',
  long: 'optional',
};
// McpServer turns anything a tool callback throws into an `isError` result. A tool
// that must end in a JSON-RPC error instead records it here (on the request's `extra`,
// which the wrapped tools/call handler below shares with the callback), and the
// wrapper throws it.
const PROTOCOL_ERROR = Symbol('protocolError');
const protocolError = (extra, code, message) => {
  const e = new McpError(code, message);
  extra[PROTOCOL_ERROR] = e;
  return e;
};

// ---------------------------------------------------------------- shared state
// Process-wide so that a change triggered in one session is announced on every
// session's GET stream (a stateless client's listen stream and its trigger call
// usually reach the upstream through different sessions).
const state = { dynamicTool: false, dynamicPrompt: false, dynamicResource: false };
/** sessionId -> { transport, mcp, tools, prompts, resources, subscriptions:Set } */
const sessions = new Map();

// ---------------------------------------------------------------- per-session server
function createSession() {
  const mcp = new McpServer(SERVER_INFO, {
    capabilities: {
      tools: { listChanged: true },
      prompts: { listChanged: true },
      resources: { subscribe: true, listChanged: true },
      logging: {},
      completions: {},
    },
    instructions: 'Conformance fixture for mcp-session-proxy (legacy 2025-11-25 server).',
  });
  const server = mcp.server;
  const subscriptions = new Set();
  const handles = {};

  // Log to the client on the request's own stream, honouring logging/setLevel.
  const log = async (extra, level, data) => {
    if (server.isMessageIgnored(level, extra.sessionId)) return;
    await extra.sendNotification({ method: 'notifications/message', params: { level, logger: LOGGER, data } });
  };
  // A server-to-client request on the tools/call (or prompts/get) stream,
  // tagged with the inputRequests key it stands for. `opts` (tasks tools only):
  // `hint: true` tags it even without --input-key-hints; `signal` cancels it
  // (notifications/cancelled to the client) when the tools/call is cancelled.
  const ask = (extra, key, method, params, schema, opts = {}) =>
    extra.sendRequest(
      { method, params: inputKeyHints || opts.hint ? { ...params, _meta: { [INPUT_KEY]: key } } : params },
      schema,
      opts.signal ? { signal: opts.signal } : undefined,
    );
  const elicit = (extra, key, message, properties, required, opts) =>
    ask(extra, key, 'elicitation/create', {
      mode: 'form',
      message,
      requestedSchema: { type: 'object', properties, required },
    }, ElicitResultSchema, opts);
  const sample = (extra, key, prompt, maxTokens) =>
    ask(extra, key, 'sampling/createMessage', {
      messages: [{ role: 'user', content: { type: 'text', text: prompt } }],
      maxTokens,
    }, CreateMessageResultSchema);
  const listRoots = (extra, key) => ask(extra, key, 'roots/list', {}, ListRootsResultSchema);
  const sampledText = (r) => (r?.content?.type === 'text' ? r.content.text : JSON.stringify(r?.content));

  // ===== tools: content (tools-call-* scenarios); test_simple_text must stay first
  mcp.registerTool('test_simple_text', { description: 'Returns simple text content' },
    async () => text('This is a simple text response for testing.'));
  mcp.registerTool('test_image_content', { description: 'Returns image content (1x1 PNG)' },
    async () => ({ content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] }));
  mcp.registerTool('test_audio_content', { description: 'Returns audio content (minimal WAV)' },
    async () => ({ content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] }));
  mcp.registerTool('test_embedded_resource', { description: 'Returns an embedded text resource' },
    async () => ({
      content: [{
        type: 'resource',
        resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
      }],
    }));
  mcp.registerTool('test_multiple_content_types', { description: 'Returns text, image and resource content' },
    async () => ({
      content: [
        { type: 'text', text: 'Multiple content types test:' },
        { type: 'image', data: PNG, mimeType: 'image/png' },
        {
          type: 'resource',
          resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: JSON.stringify({ test: 'data', value: 123 }) },
        },
      ],
    }));
  mcp.registerTool('test_error_handling', { description: 'Always fails (isError: true)' }, async () => {
    throw new Error('This tool intentionally returns an error for testing');
  });
  mcp.registerTool('test_tool_with_logging',
    { description: 'Sends 3 info log notifications (50 ms apart) on its request stream', inputSchema: {} },
    async (_args, extra) => {
      await log(extra, 'info', 'Tool execution started');
      await sleep(50);
      await log(extra, 'info', 'Tool processing data');
      await sleep(50);
      await log(extra, 'info', 'Tool execution completed');
      return text('Tool with logging executed successfully');
    });
  mcp.registerTool('test_tool_with_progress',
    { description: 'Reports progress 0, 50, 100 of 100 (50 ms apart) when given a progressToken', inputSchema: {} },
    async (_args, extra) => {
      const token = extra._meta?.progressToken;
      for (const progress of [0, 50, 100]) {
        if (token !== undefined) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken: token, progress, total: 100, message: `Completed step ${progress} of 100` },
          });
        }
        if (progress < 100) await sleep(50);
      }
      return text(`Progress test completed (token ${JSON.stringify(token ?? null)})`);
    });
  mcp.registerTool('test_reconnection',
    { description: 'SEP-1699: closes its SSE stream mid-call; the result arrives after reconnection (Last-Event-ID)', inputSchema: {} },
    async (_args, extra) => {
      extra.closeSSEStream?.();
      await sleep(100);
      return text('Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure.');
    });

  // ===== tools: server-to-client requests (2025-11-25 scenarios)
  mcp.registerTool('test_sampling',
    { description: 'Asks the client for sampling/createMessage with the prompt', inputSchema: { prompt: z.string().describe('The prompt to send to the LLM') } },
    async ({ prompt }, extra) => {
      const r = await sample(extra, 'sampling', prompt, 100);
      return text(`LLM response: ${sampledText(r)}`);
    });
  mcp.registerTool('test_elicitation',
    { description: 'Asks the client for elicitation/create (username, email)', inputSchema: { message: z.string().describe('The message to show the user') } },
    async ({ message }, extra) => {
      const r = await elicit(extra, 'user_info', message, {
        username: { type: 'string', description: "User's response" },
        email: { type: 'string', description: "User's email address" },
      }, ['username', 'email']);
      return text(`User response: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
    });
  mcp.registerTool('test_elicitation_sep1034_defaults',
    { description: 'SEP-1034: elicitation with defaults for every primitive type', inputSchema: {} },
    async (_args, extra) => {
      const r = await elicit(extra, 'defaults', 'Please review and update the form fields with defaults', {
        name: { type: 'string', description: 'User name', default: 'John Doe' },
        age: { type: 'integer', description: 'User age', default: 30 },
        score: { type: 'number', description: 'User score', default: 95.5 },
        status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
        verified: { type: 'boolean', description: 'Verification status', default: true },
      }, []);
      return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
    });
  mcp.registerTool('test_elicitation_sep1330_enums',
    { description: 'SEP-1330: elicitation with the five enum schema variants', inputSchema: {} },
    async (_args, extra) => {
      const r = await elicit(extra, 'enums', 'Please select options from the enum fields', {
        untitledSingle: { type: 'string', description: 'Select one option', enum: ['option1', 'option2', 'option3'] },
        titledSingle: {
          type: 'string',
          description: 'Select one option with titles',
          oneOf: [
            { const: 'value1', title: 'First Option' },
            { const: 'value2', title: 'Second Option' },
            { const: 'value3', title: 'Third Option' },
          ],
        },
        legacyEnum: {
          type: 'string',
          description: 'Select one option (legacy)',
          enum: ['opt1', 'opt2', 'opt3'],
          enumNames: ['Option One', 'Option Two', 'Option Three'],
        },
        untitledMulti: {
          type: 'array',
          description: 'Select multiple options',
          minItems: 1,
          maxItems: 3,
          items: { type: 'string', enum: ['option1', 'option2', 'option3'] },
        },
        titledMulti: {
          type: 'array',
          description: 'Select multiple options with titles',
          minItems: 1,
          maxItems: 3,
          items: {
            anyOf: [
              { const: 'value1', title: 'First Choice' },
              { const: 'value2', title: 'Second Choice' },
              { const: 'value3', title: 'Third Choice' },
            ],
          },
        },
      }, []);
      return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
    });

  // ===== tools: schema scenarios (listed with a patched inputSchema, see below)
  mcp.registerTool('json_schema_2020_12_tool',
    {
      description: 'Tool with JSON Schema 2020-12 features (SEP-1613, SEP-2106)',
      inputSchema: {
        name: z.string().optional(),
        address: z.object({ street: z.string().optional(), city: z.string().optional() }).optional(),
        contactMethod: z.enum(['phone', 'email']).optional(),
        phone: z.string().optional(),
        email: z.string().optional(),
      },
    },
    async (args) => text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`));
  mcp.registerTool('test_header_param',
    {
      description: 'SEP-2243: its string argument `region` is mirrored into the Mcp-Param-Region header (x-mcp-header)',
      inputSchema: { region: z.string().describe('Region, mirrored into Mcp-Param-Region') },
    },
    async ({ region }) => text(`region=${region}`));

  // ===== tools: 2026-07-28 server-stateless diagnostics
  mcp.registerTool('test_missing_capability',
    { description: 'Needs the client sampling capability: sends sampling/createMessage whether or not the client declared it', inputSchema: {} },
    async (_args, extra) => {
      const r = await sample(extra, 'sampling', 'Diagnostic: sampling is required', 10);
      return text(`Sampling answered: ${sampledText(r)}`);
    });
  mcp.registerTool('test_streaming_elicitation',
    { description: 'Sends elicitation/create on its request stream right away', inputSchema: {} },
    async (_args, extra) => {
      const r = await elicit(extra, 'streaming_input', 'Streaming elicitation: enter a value', { value: { type: 'string' } }, ['value']);
      return text(`Streaming elicitation: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
    });
  mcp.registerTool('test_logging_tool',
    { description: 'Sends 3 info log notifications (20 ms apart), honouring logging/setLevel only', inputSchema: {} },
    async (_args, extra) => {
      for (const m of ['Logging tool started', 'Logging tool working', 'Logging tool finished']) {
        await log(extra, 'info', m);
        await sleep(20);
      }
      return text('Logging tool executed');
    });
  mcp.registerTool('test_trigger_tool_change',
    { description: 'Toggles test_dynamic_tool in every session: notifications/tools/list_changed on each GET stream', inputSchema: {} },
    async () => {
      state.dynamicTool = !state.dynamicTool;
      for (const s of sessions.values()) s.handles.dynamicTool[state.dynamicTool ? 'enable' : 'disable']();
      return text(`test_dynamic_tool is now ${state.dynamicTool ? 'listed' : 'unlisted'}`);
    });
  mcp.registerTool('test_trigger_prompt_change',
    { description: 'Toggles test_dynamic_prompt in every session: notifications/prompts/list_changed on each GET stream', inputSchema: {} },
    async () => {
      state.dynamicPrompt = !state.dynamicPrompt;
      for (const s of sessions.values()) s.handles.dynamicPrompt[state.dynamicPrompt ? 'enable' : 'disable']();
      return text(`test_dynamic_prompt is now ${state.dynamicPrompt ? 'listed' : 'unlisted'}`);
    });
  mcp.registerTool('test_trigger_resource_change',
    { description: 'Toggles test://dynamic-resource in every session: notifications/resources/list_changed on each GET stream', inputSchema: {} },
    async () => {
      state.dynamicResource = !state.dynamicResource;
      for (const s of sessions.values()) s.handles.dynamicResource[state.dynamicResource ? 'enable' : 'disable']();
      return text(`test://dynamic-resource is now ${state.dynamicResource ? 'listed' : 'unlisted'}`);
    });
  mcp.registerTool('test_trigger_resource_update',
    {
      description: 'Sends notifications/resources/updated {uri} on the GET stream of every session subscribed to uri',
      inputSchema: { uri: z.string().optional().describe('default test://watched-resource') },
    },
    async ({ uri }) => {
      const target = uri ?? 'test://watched-resource';
      let n = 0;
      for (const s of sessions.values()) {
        if (s.subscriptions.has(target)) {
          n++;
          s.mcp.server.sendResourceUpdated({ uri: target }).catch(() => {});
        }
      }
      return text(`notified ${n} subscribed session(s) of ${target}`);
    });
  handles.dynamicTool = mcp.registerTool('test_dynamic_tool',
    { description: 'Listed or not, as test_trigger_tool_change toggles it' },
    async () => text('dynamic tool called'));
  if (!state.dynamicTool) handles.dynamicTool.disable();
  mcp.registerTool('test_client_info',
    { description: 'Reports what this server saw at initialize: session id, protocol version, clientInfo, client capabilities', inputSchema: {} },
    async (_args, extra) => {
      const info = {
        sessionId: extra.sessionId ?? null,
        protocolVersion: extra.requestInfo?.headers?.['mcp-protocol-version'] ?? null,
        clientInfo: server.getClientVersion() ?? null,
        clientCapabilities: server.getClientCapabilities() ?? null,
      };
      return { content: [{ type: 'text', text: JSON.stringify(info) }], structuredContent: info };
    });

  // ===== tools: 2026-07-28 input-required-result-* (SEP-2322) — legacy flavour:
  // each one sends real server-to-client requests on its stream and waits.
  mcp.registerTool('test_input_required_result_elicitation',
    { description: 'SEP-2322 A1: elicitation/create "What is your name?" (key user_name), then "Hello, <name>!"', inputSchema: {} },
    async (_args, extra) => {
      const r = await elicit(extra, 'user_name', 'What is your name?', { name: { type: 'string' } }, ['name']);
      return text(`Hello, ${r.content?.name ?? 'stranger'}!`);
    });
  mcp.registerTool('test_input_required_result_sampling',
    { description: 'SEP-2322: sampling/createMessage "What is the capital of France?" (key capital_question)', inputSchema: {} },
    async (_args, extra) => {
      const r = await sample(extra, 'capital_question', 'What is the capital of France?', 100);
      return text(`Sampling said: ${sampledText(r)}`);
    });
  mcp.registerTool('test_input_required_result_list_roots',
    { description: 'SEP-2322: roots/list (key client_roots), then lists the roots it got', inputSchema: {} },
    async (_args, extra) => {
      const r = await listRoots(extra, 'client_roots');
      return text(`Roots: ${(r.roots ?? []).map((x) => x.uri).join(', ')}`);
    });
  mcp.registerTool('test_input_required_result_request_state',
    { description: 'SEP-2322: elicitation/create "Please confirm" (key confirm); the result text contains state-ok', inputSchema: {} },
    async (_args, extra) => {
      const r = await elicit(extra, 'confirm', 'Please confirm', { ok: { type: 'boolean' } }, ['ok']);
      return text(`state-ok: confirmed=${JSON.stringify(r.content?.ok ?? null)}`);
    });
  mcp.registerTool('test_input_required_result_tampered_state',
    { description: 'SEP-2322: elicitation/create "Please confirm" (key confirm); a proxy must refuse a tampered requestState', inputSchema: {} },
    async (_args, extra) => {
      const r = await elicit(extra, 'confirm', 'Please confirm', { ok: { type: 'boolean' } }, ['ok']);
      return text(`state-ok: confirmed=${JSON.stringify(r.content?.ok ?? null)}`);
    });
  mcp.registerTool('test_input_required_result_multiple_inputs',
    { description: 'SEP-2322: sends elicitation (user_name), sampling (greeting) and roots/list (client_roots) at once', inputSchema: {} },
    async (_args, extra) => {
      const [who, greeting, roots] = await Promise.all([
        elicit(extra, 'user_name', 'What is your name?', { name: { type: 'string' } }, ['name']),
        sample(extra, 'greeting', 'Generate a greeting', 50),
        listRoots(extra, 'client_roots'),
      ]);
      return text(`name=${who.content?.name ?? ''} greeting=${sampledText(greeting)} roots=${(roots.roots ?? []).length}`);
    });
  mcp.registerTool('test_input_required_result_multi_round',
    { description: 'SEP-2322: elicitation step1 (name), then step2 (color), then completes', inputSchema: {} },
    async (_args, extra) => {
      const a = await elicit(extra, 'step1', 'Step 1: What is your name?', { name: { type: 'string' } }, ['name']);
      const b = await elicit(extra, 'step2', 'Step 2: What is your favorite color?', { color: { type: 'string' } }, ['color']);
      return text(`name=${a.content?.name ?? ''} color=${b.content?.color ?? ''}`);
    });
  mcp.registerTool('test_input_required_result_capabilities',
    { description: 'SEP-2322: asks only for what the client declared at initialize (elicitation, sampling, roots), at once', inputSchema: {} },
    async (_args, extra) => {
      const caps = server.getClientCapabilities() ?? {};
      const asks = [];
      if (caps.elicitation) asks.push(elicit(extra, 'user_name', 'What is your name?', { name: { type: 'string' } }, ['name']).then(() => 'elicitation'));
      if (caps.sampling) asks.push(sample(extra, 'capability_sampling', 'Say hi', 20).then(() => 'sampling'));
      if (caps.roots) asks.push(listRoots(extra, 'client_roots').then(() => 'roots'));
      const got = await Promise.all(asks);
      return text(`asked for: ${got.join(', ') || 'nothing'}`);
    });

  // ===== tools: the tasks extension (io.modelcontextprotocol/tasks, 2026-07-28) — legacy
  // flavour. The 2026-07-28 suite's tasks-* scenarios call these (and the ext-tasks client,
  // tests/interop/ts2/tasks-client.mjs, calls `long`). Each runs as a PLAIN 2025-11-25
  // tools/call; only its tools/list entry declares `execution.taskSupport` (TASK_SUPPORT
  // above), from which the proxy decides to run the call as a task. Waits are abortable:
  // notifications/cancelled for the call stops the tool (and cancels a pending ask).
  mcp.registerTool('greet',
    { description: 'Tasks: a synchronous tool (no task support); returns "Hello, <name>!"', inputSchema: { name: z.string().describe('Who to greet') } },
    async ({ name }) => text(`Hello, ${name}!`));
  mcp.registerTool('slow_compute',
    {
      description: 'Tasks (taskSupport optional): sleeps `seconds` seconds, then returns "computed <label> after <seconds>s"',
      inputSchema: { seconds: z.number().describe('How long to work, in seconds'), label: z.string().describe('A label echoed in the result') },
    },
    async ({ seconds, label }, extra) => {
      await sleepUnless(seconds * 1000, extra.signal);
      return text(`computed ${label} after ${seconds}s`);
    });
  mcp.registerTool('failing_job',
    { description: 'Tasks (taskSupport required): after about 1 s returns a tool error (isError: true)', inputSchema: {} },
    async (_args, extra) => {
      await sleepUnless(1000, extra.signal);
      return { content: [{ type: 'text', text: 'failing_job failed on purpose (tool error)' }], isError: true };
    });
  mcp.registerTool('protocol_error_job',
    { description: 'Tasks (taskSupport optional): after about 1 s fails with a JSON-RPC error -32603 (not isError)', inputSchema: {} },
    async (_args, extra) => {
      await sleepUnless(1000, extra.signal);
      throw protocolError(extra, -32603, 'protocol_error_job failed on purpose (protocol error)');
    });
  mcp.registerTool('confirm_delete',
    {
      description: 'Tasks (taskSupport optional): after 1 s asks elicitation/create {confirm: boolean} (key confirm); "deleted <filename>" if confirmed, else "kept <filename>"',
      inputSchema: { filename: z.string().describe('The file to delete') },
    },
    async ({ filename }, extra) => {
      await sleepUnless(1000, extra.signal);
      const r = await elicit(extra, 'confirm', `Delete ${filename}?`, { confirm: { type: 'boolean', description: 'Confirm the deletion' } },
        ['confirm'], { signal: extra.signal });
      const yes = r.action === 'accept' && r.content?.confirm === true;
      return text(`${yes ? 'deleted' : 'kept'} ${filename}`);
    });
  mcp.registerTool('multi_input',
    { description: 'Tasks (taskSupport optional): after 1 s asks two elicitation/create {name, confirm} at once (keys partial_1, partial_2); returns both names', inputSchema: {} },
    async (_args, extra) => {
      await sleepUnless(1000, extra.signal);
      const properties = { name: { type: 'string', description: 'A name' }, confirm: { type: 'boolean', description: 'Confirm' } };
      const [a, b] = await Promise.all([
        elicit(extra, 'partial_1', 'Input 1 of 2: a name and a confirmation', properties, [], { signal: extra.signal }),
        elicit(extra, 'partial_2', 'Input 2 of 2: a name and a confirmation', properties, [], { signal: extra.signal }),
      ]);
      return text(`multi_input got: ${a.content?.name ?? `(${a.action})`}, ${b.content?.name ?? `(${b.action})`}`);
    });
  mcp.registerTool('test_tool_with_task',
    { description: 'Tasks (taskSupport required): asks elicitation/create {name} at once (key task_name), then works 1.5 s and returns "Hello, <name>!"', inputSchema: {} },
    async (_args, extra) => {
      const r = await elicit(extra, 'task_name', 'What is your name?', { name: { type: 'string', description: 'Your name' } }, ['name'],
        { signal: extra.signal });
      await sleepUnless(1500, extra.signal);
      return text(`Hello, ${r.content?.name ?? 'stranger'}!`);
    });
  mcp.registerTool('long',
    {
      description: 'Tasks (taskSupport optional), for tests/interop/ts2/tasks-client.mjs: works `ms` ms, then "long task finished after <ms>ms". '
        + 'ask: after max(1000, ms/2) ms asks elicitation/create {ok: boolean} (always key-hinted confirm-1), then works max(ms/2, 1500) ms more. fail: ends in JSON-RPC error -32603',
      inputSchema: { ms: z.number().optional(), ask: z.boolean().optional(), fail: z.boolean().optional() },
    },
    async ({ ms = 1000, ask = false, fail = false }, extra) => {
      let answer;
      if (ask) {
        await sleepUnless(Math.max(1000, ms / 2), extra.signal);
        // The key hint is set whatever --input-key-hints says, so that through the proxy the
        // task's inputRequests key is confirm-1, as with the 2026-07-28 ts2 server's `long`.
        answer = await elicit(extra, 'confirm-1', 'Continue the long task?', { ok: { type: 'boolean', title: 'Continue?' } }, ['ok'],
          { signal: extra.signal, hint: true });
        // Long enough after the answer for a client polling every pollIntervalMs to see it
        // working again before it ends.
        await sleepUnless(Math.max(ms / 2, 1500), extra.signal);
      } else {
        await sleepUnless(ms, extra.signal);
      }
      if (fail) throw protocolError(extra, -32603, 'failed on purpose');
      return text(`long task finished after ${ms}ms${answer ? ` (answer=${JSON.stringify(answer)})` : ''}`);
    });

  // ===== resources
  mcp.registerResource('static-text', 'test://static-text',
    { title: 'Static Text Resource', description: 'A static text resource', mimeType: 'text/plain' },
    async () => ({ contents: [{ uri: 'test://static-text', mimeType: 'text/plain', text: 'This is the content of the static text resource.' }] }));
  mcp.registerResource('static-binary', 'test://static-binary',
    { title: 'Static Binary Resource', description: 'A static binary resource (PNG)', mimeType: 'image/png' },
    async () => ({ contents: [{ uri: 'test://static-binary', mimeType: 'image/png', blob: PNG }] }));
  mcp.registerResource('template', new ResourceTemplate('test://template/{id}/data', { list: undefined }),
    { title: 'Resource Template', description: 'Substitutes {id}', mimeType: 'application/json' },
    async (uri, { id }) => ({
      contents: [{ uri: uri.toString(), mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }],
    }));
  mcp.registerResource('watched-resource', 'test://watched-resource',
    { title: 'Watched Resource', description: 'Subscribable; see test_trigger_resource_update', mimeType: 'text/plain' },
    async () => ({ contents: [{ uri: 'test://watched-resource', mimeType: 'text/plain', text: 'Watched resource content' }] }));
  handles.dynamicResource = mcp.registerResource('dynamic-resource', 'test://dynamic-resource',
    { title: 'Dynamic Resource', description: 'Listed or not, as test_trigger_resource_change toggles it', mimeType: 'text/plain' },
    async () => ({ contents: [{ uri: 'test://dynamic-resource', mimeType: 'text/plain', text: 'Dynamic resource content' }] }));
  if (!state.dynamicResource) handles.dynamicResource.disable();
  server.setRequestHandler(SubscribeRequestSchema, async (req) => {
    subscriptions.add(req.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
    subscriptions.delete(req.params.uri);
    return {};
  });

  // ===== prompts
  mcp.registerPrompt('test_simple_prompt', { title: 'Simple Test Prompt', description: 'A prompt without arguments' },
    async () => ({ messages: [{ role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } }] }));
  mcp.registerPrompt('test_prompt_with_arguments',
    {
      title: 'Prompt With Arguments',
      description: 'A prompt with two required arguments',
      argsSchema: { arg1: z.string().describe('First test argument'), arg2: z.string().describe('Second test argument') },
    },
    async ({ arg1, arg2 }) => ({
      messages: [{ role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` } }],
    }));
  mcp.registerPrompt('test_prompt_with_embedded_resource',
    {
      title: 'Prompt With Embedded Resource',
      description: 'A prompt embedding a resource',
      argsSchema: { resourceUri: z.string().describe('URI of the resource to embed') },
    },
    async ({ resourceUri }) => ({
      messages: [
        { role: 'user', content: { type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
        { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } },
      ],
    }));
  mcp.registerPrompt('test_prompt_with_image', { title: 'Prompt With Image', description: 'A prompt with image content' },
    async () => ({
      messages: [
        { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
        { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } },
      ],
    }));
  mcp.registerPrompt('test_input_required_result_prompt',
    { title: 'Prompt Needing Input', description: 'SEP-2322: prompts/get sends elicitation/create (key user_context) first' },
    async (extra) => {
      const r = await elicit(extra, 'user_context', 'What context should the prompt use?', { context: { type: 'string' } }, ['context']);
      return { messages: [{ role: 'user', content: { type: 'text', text: `Prompt with context: ${r.content?.context ?? ''}` } }] };
    });
  handles.dynamicPrompt = mcp.registerPrompt('test_dynamic_prompt',
    { title: 'Dynamic Prompt', description: 'Listed or not, as test_trigger_prompt_change toggles it' },
    async () => ({ messages: [{ role: 'user', content: { type: 'text', text: 'dynamic prompt' } }] }));
  if (!state.dynamicPrompt) handles.dynamicPrompt.disable();

  // ===== completion/complete (completion-complete scenario)
  const WORDS = ['paris', 'park', 'party', 'test', 'testValue1', 'testing'];
  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const prefix = String(req.params.argument?.value ?? '');
    const values = WORDS.filter((w) => w.startsWith(prefix));
    return { completion: { values, total: values.length, hasMore: false } };
  });

  // ===== tools/list: raw schemas the SDK's zod conversion cannot express
  // (and the tasks tools' `execution.taskSupport`, which registerTool fixes at "forbidden").
  const listTools = server._requestHandlers.get('tools/list');
  server._requestHandlers.set('tools/list', async (req, extra) => {
    const result = await listTools(req, extra);
    for (const tool of result.tools) {
      if (tool.name === 'json_schema_2020_12_tool') tool.inputSchema = JSON_SCHEMA_2020_12;
      if (tool.name === 'test_header_param' && tool.inputSchema?.properties?.region) {
        tool.inputSchema.properties.region['x-mcp-header'] = 'Region';
      }
      if (TASK_SUPPORT[tool.name]) tool.execution = { ...tool.execution, taskSupport: TASK_SUPPORT[tool.name] };
    }
    return result;
  });
  // ===== tools/call: a JSON-RPC error recorded by protocolError() replaces the isError
  // result McpServer made of the throw.
  const callTool = server._requestHandlers.get('tools/call');
  server._requestHandlers.set('tools/call', async (req, extra) => {
    const result = await callTool(req, extra);
    if (extra[PROTOCOL_ERROR]) throw extra[PROTOCOL_ERROR];
    return result;
  });

  return { mcp, handles, subscriptions };
}

// ---------------------------------------------------------------- event store (SEP-1699 resumability)
function createEventStore() {
  const events = new Map(); // eventId -> { streamId, message }
  let seq = 0;
  return {
    async storeEvent(streamId, message) {
      const eventId = `${streamId}::${String(++seq).padStart(12, '0')}`;
      events.set(eventId, { streamId, message });
      if (events.size > 10000) events.delete(events.keys().next().value);
      return eventId;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const streamId = String(lastEventId).split('::')[0];
      for (const [eventId, ev] of events) {
        if (ev.streamId === streamId && eventId > lastEventId && Object.keys(ev.message).length > 0) {
          await send(eventId, ev.message);
        }
      }
      return streamId;
    },
  };
}

// ---------------------------------------------------------------- HTTP front
const LOCAL_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);
function hostnameOf(hostHeader) {
  const h = String(hostHeader ?? '').toLowerCase();
  if (h.startsWith('[')) return h.slice(0, h.indexOf(']') + 1);
  return h.split(':')[0];
}
function originOk(origin) {
  if (origin === undefined) return true;
  try {
    const u = new URL(origin);
    return LOCAL_HOSTS.has(u.hostname.toLowerCase()) || u.hostname === '[::1]';
  } catch {
    return false;
  }
}
function sendError(res, status, code, message, id = null) {
  if (res.headersSent) return;
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', id, error: { code, message } }));
}
function readBody(req, limit = 4 * 1024 * 1024) {
  return new Promise((resolveBody, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > limit) {
        reject(Object.assign(new Error('body too large'), { status: 413 }));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => resolveBody(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
const isInitialize = (body) => !Array.isArray(body) && body?.method === 'initialize';

async function handle(req, res) {
  const url = new URL(req.url, 'http://localhost');
  if (url.pathname === '/healthz') {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end('{"status":"ok"}');
    return;
  }
  if (url.pathname !== '/mcp') return sendError(res, 404, -32000, 'Not found');
  // DNS-rebinding protection (dns-rebinding-protection scenario).
  if (!LOCAL_HOSTS.has(hostnameOf(req.headers.host))) return sendError(res, 403, -32000, 'Forbidden: invalid Host header');
  if (!originOk(req.headers.origin)) return sendError(res, 403, -32000, 'Forbidden: invalid Origin header');

  const sid = req.headers['mcp-session-id'];
  let body;
  if (req.method === 'POST') {
    let raw;
    try {
      raw = await readBody(req);
    } catch (e) {
      return sendError(res, e.status ?? 400, -32000, e.message);
    }
    try {
      body = JSON.parse(raw);
    } catch {
      return sendError(res, 400, -32700, 'Parse error');
    }
  } else if (req.method !== 'GET' && req.method !== 'DELETE') {
    res.writeHead(405, { Allow: 'GET, POST, DELETE' }).end();
    return;
  }

  if (sid !== undefined) {
    const s = sessions.get(sid);
    if (!s) return sendError(res, 404, -32001, 'Session not found', body?.id ?? null);
    await s.transport.handleRequest(req, res, body);
    return;
  }
  if (req.method === 'POST' && isInitialize(body)) {
    let sessionId;
    const session = createSession();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: jsonResponse,
      eventStore: createEventStore(),
      retryInterval: 1000,
      onsessioninitialized: (id) => {
        sessionId = id;
        sessions.set(id, { ...session, transport });
      },
    });
    transport.onclose = () => {
      if (sessionId && sessions.get(sessionId)?.transport === transport) sessions.delete(sessionId);
      session.mcp.close().catch(() => {});
    };
    await session.mcp.connect(transport);
    await transport.handleRequest(req, res, body);
    return;
  }
  return sendError(res, 400, -32000, 'Bad Request: Mcp-Session-Id header is required', body?.id ?? null);
}

const httpServer = http.createServer((req, res) => {
  handle(req, res).catch((e) => {
    process.stderr.write(`fixture: ${e?.stack ?? e}\n`);
    sendError(res, 500, -32603, 'Internal error');
  });
});
httpServer.on('error', (e) => {
  process.stderr.write(`fixture: ${e.message}\n`);
  process.exit(1);
});
httpServer.listen(port, host, () => {
  process.stdout.write(`READY ${httpServer.address().port}\n`);
});
const shutdown = () => {
  for (const s of sessions.values()) s.transport.close().catch(() => {});
  httpServer.close(() => process.exit(0));
  httpServer.closeAllConnections?.();
  setTimeout(() => process.exit(0), 1000).unref();
};
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
