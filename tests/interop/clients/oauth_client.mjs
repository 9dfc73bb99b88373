// A real OAuth-protected MCP client: the official TypeScript SDK 1.x (1.32.2) with its
// client_credentials provider (ClientCredentialsProvider, client/auth-extensions.js) on
// StreamableHTTPClientTransport. The SDK does the whole dance by itself inside connect():
// POST initialize -> 401 -> WWW-Authenticate resource_metadata -> protected resource metadata
// -> authorization server metadata -> POST token (grant_type=client_credentials, resource =
// the metadata's `resource`) -> the same POST again with Authorization: Bearer.
//
// Usage: node oauth_client.mjs --url URL --client-id ID --client-secret S [--scope "a b"]
//                              [--issuer AS_URL] [--call TOOL [--args JSON]]
//   --scope   sent as the token request's scope (without it: none, and the authorization
//             server decides; tests/interop/oauth/server.mjs then grants all the client's scopes)
//   --issuer  the provider's expectedIssuer: the credentials go to that authorization server only
//             (without it the SDK warns on stderr and uses whichever the resource server names)
// Lists the tools, optionally calls one, and prints ONE JSON line to stdout:
//   {"ok":true,"tools":[names],"call":<CallToolResult or null>,"error":null}
//   {"ok":false,"stage":"connect"|"list"|"call","error":"message","code":<HTTP status or JSON-RPC code, or null>}
// and exits 0 either way (2 on a usage error).
// SDK: env MCP_SDK_NODE_MODULES, else $INTEROP_TOOLS/sdk/node_modules (tests/interop/setup.sh).
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const tools = process.env.INTEROP_TOOLS || path.resolve(HERE, '..', '..', '..', 'target', 'interop-tools');
const modules = process.env.MCP_SDK_NODE_MODULES || path.join(tools, 'sdk', 'node_modules');
const load = p => import(pathToFileURL(path.join(modules, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await load('client/index.js');
const { StreamableHTTPClientTransport } = await load('client/streamableHttp.js');
const { ClientCredentialsProvider } = await load('client/auth-extensions.js');

const usage = 'usage: node oauth_client.mjs --url URL --client-id ID --client-secret S [--scope "a b"] [--issuer AS_URL] [--call TOOL [--args JSON]]';
let opts;
let callArgs;
try {
    ({ values: opts } = parseArgs({
        options: {
            url: { type: 'string' },
            'client-id': { type: 'string' },
            'client-secret': { type: 'string' },
            scope: { type: 'string' },
            issuer: { type: 'string' },
            call: { type: 'string' },
            args: { type: 'string', default: '{}' }
        }
    }));
    if (!opts.url || !opts['client-id'] || !opts['client-secret']) throw new Error('--url, --client-id and --client-secret are required');
    callArgs = JSON.parse(opts.args);
} catch (e) {
    console.error(`${e.message}\n${usage}`);
    process.exit(2);
}

const done = record => {
    process.stdout.write(JSON.stringify(record) + '\n');
    process.exit(0);
};
let stage = 'connect';
const fail = e =>
    done({
        ok: false,
        stage,
        // OAuthError (the token endpoint's answer) carries errorCode, e.g. "invalid_scope".
        error: e?.errorCode ? `${e.errorCode}: ${e.message}` : (e?.message ?? String(e)),
        code: typeof e?.code === 'number' ? e.code : null
    });
setTimeout(() => fail(new Error('gave up after 30 s')), 30000).unref();

const authProvider = new ClientCredentialsProvider({
    clientId: opts['client-id'],
    clientSecret: opts['client-secret'],
    scope: opts.scope,
    expectedIssuer: opts.issuer
});
const transport = new StreamableHTTPClientTransport(new URL(opts.url), { authProvider });
const client = new Client({ name: 'ts-sdk1-oauth-client', version: '1.0.0' });
try {
    await client.connect(transport);
    stage = 'list';
    const { tools: listed } = await client.listTools();
    let call = null;
    if (opts.call) {
        stage = 'call';
        call = await client.callTool({ name: opts.call, arguments: callArgs });
    }
    await transport.terminateSession().catch(() => {});
    done({ ok: true, tools: listed.map(t => t.name), call, error: null });
} catch (e) {
    fail(e);
}
