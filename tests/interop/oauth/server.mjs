#!/usr/bin/env node
// A real OAuth 2.1 authorization server (oidc-provider 9.13.3) for the interop tests of the
// proxy's OAuth resource-server side: the client_credentials grant, RFC 8707 resource
// indicators, and RFC 9068 JWT access tokens signed RS256.
//
// Usage:
//   node server.mjs --port N --key-id KID [--key-file PATH] [--client ID:SECRET:SCOPE,SCOPE]... [--ttl S]
//     --port N        0 (the default): a free one. The issuer is http://127.0.0.1:<the real port>.
//     --key-id KID    the `kid` of the signing key (in the JWKS and in every token's header).
//     --key-file PATH a JSON file holding a private RSA JWK (its own `kid` is replaced by KID);
//                     when PATH does not exist a new key is generated and saved there, so a
//                     restart with the same PATH keeps the key. Without it: a new 2048-bit key
//                     per start. Key rotation: restart on the same port with another --key-id
//                     (and another --key-file, or none).
//     --client ...    a static confidential client (repeatable), e.g. reader:reader-secret:tools:read,
//                     admin:admin-secret:tools:read,tools:admin. The secret cannot contain ':'.
//                     client_secret_basic and client_secret_post both work.
//     --ttl S         access token lifetime in seconds (default 600).
//     --exchanger ID:SECRET  a confidential client (repeatable) that may also use RFC 8693 token
//                     exchange (below), e.g. the proxy's own client.
//
// Endpoints (oidc-provider's own): POST /token, GET /jwks, GET /.well-known/oauth-authorization-server
// (RFC 8414) and /.well-known/openid-configuration (the same metadata, with OIDC fields), POST /reg
// (open dynamic client registration, RFC 7591), POST /token/introspection.
//
// Tokens: POST /token with grant_type=client_credentials, resource=<absolute URL> (required: it
// becomes `aud`; any URL is accepted) and scope (optional: without it the client gets every scope
// it is allowed). A scope the client may not have: 400 invalid_scope. The access token is a JWT,
// header {alg: RS256, typ: at+jwt, kid}, claims iss, sub (= the client id), aud (= resource),
// client_id, scope, iat, exp, jti.
//
// Token exchange (RFC 8693; oidc-provider has the grant's plumbing, registerGrantType, not the
// grant itself): POST /token with grant_type=urn:ietf:params:oauth:grant-type:token-exchange by an
// --exchanger client, subject_token (an access token this server issued, verified against its own
// key: signature, issuer, expiry), subject_token_type=urn:ietf:params:oauth:token-type:access_token,
// resource and/or audience (the new token's aud; resource wins), scope (optional; the new token's
// scope is the subject token's, narrowed to it: nothing in common is 400 invalid_scope). The new
// token is a JWT access token as above, for the same subject, with `act: {sub: <exchanger>}`
// (RFC 8693 §4.1); the answer has issued_token_type. A subject token that does not verify:
// 400 invalid_grant.
//
// Binds 127.0.0.1 only. When it listens it prints ONE line to stdout:
//   {"url":"http://127.0.0.1:PORT","issuer":"http://127.0.0.1:PORT","port":PORT,"kid":"KID"}
// Diagnostics go to stderr. Exits on SIGTERM or SIGINT. Needs the pinned oidc-provider from
// tests/interop/setup.sh ($INTEROP_TOOLS/oauth).
import http from 'node:http';
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

// stdout carries the readiness line alone: oidc-provider prints its notices with console.info.
console.info = console.log = (...args) => console.error(...args);

const HERE = dirname(fileURLToPath(import.meta.url));
const TOOLS = process.env.INTEROP_TOOLS || resolve(HERE, '..', '..', '..', 'target', 'interop-tools');
const PROVIDER = join(TOOLS, 'oauth', 'node_modules', 'oidc-provider');
if (!existsSync(join(PROVIDER, 'package.json'))) {
    console.error(`oidc-provider is not installed under ${PROVIDER} (run tests/interop/setup.sh)`);
    process.exit(2);
}
const { default: Provider, errors } = await import(pathToFileURL(join(PROVIDER, 'lib', 'index.js')).href);

// ---------- arguments ----------
const usage = 'usage: node server.mjs --port N --key-id KID [--key-file PATH] [--client ID:SECRET:SCOPE,...]... [--ttl S]';
let opts;
try {
    ({ values: opts } = parseArgs({
        options: {
            port: { type: 'string', default: '0' },
            'key-id': { type: 'string' },
            'key-file': { type: 'string' },
            client: { type: 'string', multiple: true, default: [] },
            exchanger: { type: 'string', multiple: true, default: [] },
            ttl: { type: 'string', default: '600' }
        }
    }));
} catch (e) {
    console.error(`${e.message}\n${usage}`);
    process.exit(2);
}
const port = Number(opts.port);
const ttl = Number(opts.ttl);
const kid = opts['key-id'];
if (!kid || !Number.isInteger(port) || !(Number.isInteger(ttl) && ttl > 0)) {
    console.error(usage);
    process.exit(2);
}
const clients = opts.client.map(spec => {
    const [id, secret, ...rest] = spec.split(':');
    const scopes = rest.join(':').split(',').filter(Boolean);
    if (!id || !secret || !scopes.length) {
        console.error(`--client ${spec}: expected ID:SECRET:SCOPE[,SCOPE...]`);
        process.exit(2);
    }
    return { id, secret, scopes };
});
const exchangers = opts.exchanger.map(spec => {
    const [id, secret] = spec.split(':');
    if (!id || !secret) {
        console.error(`--exchanger ${spec}: expected ID:SECRET`);
        process.exit(2);
    }
    return { id, secret };
});
const HOST = '127.0.0.1';
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';

// ---------- the signing key ----------
function newKey() {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    return privateKey.export({ format: 'jwk' });
}
let jwk;
const keyFile = opts['key-file'];
if (keyFile && existsSync(keyFile)) {
    jwk = JSON.parse(readFileSync(keyFile, 'utf8'));
    if (jwk.kty !== 'RSA' || !jwk.d) {
        console.error(`${keyFile}: not a private RSA JWK`);
        process.exit(2);
    }
} else {
    jwk = newKey();
    if (keyFile) writeFileSync(keyFile, JSON.stringify(jwk) + '\n', { mode: 0o600 });
}
jwk = { ...jwk, kid, alg: 'RS256', use: 'sig' };

// ---------- the provider ----------
const server = http.createServer();
try {
    await new Promise((done, fail) => {
        server.once('error', fail);
        server.listen(port, HOST, done);
    });
} catch (e) {
    console.error(`cannot listen on ${HOST}:${port}: ${e.message}`);
    process.exit(1);
}
const realPort = server.address().port;
const issuer = `http://${HOST}:${realPort}`;

// Every scope some client may have (the metadata's scopes_supported, and what a client
// registered without `scope` may ask for).
const allScopes = [...new Set(clients.flatMap(c => c.scopes))];

const provider = new Provider(issuer, {
    clients: [
        ...clients.map(c => ({
            client_id: c.id,
            client_secret: c.secret,
            scope: c.scopes.join(' '),
            grant_types: ['client_credentials'],
            response_types: [],
            redirect_uris: [],
            token_endpoint_auth_method: 'client_secret_basic'
        })),
        ...exchangers.map(c => ({
            client_id: c.id,
            client_secret: c.secret,
            scope: allScopes.join(' '),
            grant_types: [TOKEN_EXCHANGE],
            response_types: [],
            redirect_uris: [],
            token_endpoint_auth_method: 'client_secret_basic'
        }))
    ],
    jwks: { keys: [jwk] },
    // An exchanged token says who acts for its subject (RFC 8693 §4.1).
    extraTokenClaims: (ctx, token) => (token.gty === 'token_exchange' ? { act: { sub: token.clientId } } : undefined),
    scopes: allScopes,
    clientBasedCORS: () => true,
    ttl: { AccessToken: ttl, ClientCredentials: ttl },
    features: {
        devInteractions: { enabled: false },
        clientCredentials: { enabled: true },
        introspection: { enabled: true },
        registration: { enabled: true },
        resourceIndicators: {
            enabled: true,
            // No `resource`: refused, since the token's `aud` would be missing.
            defaultResource(ctx, client, oneOf) {
                if (oneOf) return oneOf;
                if (ctx.oidc.params?.grant_type === 'client_credentials') {
                    throw new errors.InvalidTarget('the resource parameter is required');
                }
                return undefined;
            },
            // Any resource URL is a resource server taking JWTs with the client's scopes; the
            // token's `aud` is the resource, verbatim.
            getResourceServerInfo(ctx, resource, client) {
                const scope = client.scope ?? allScopes.join(' ');
                const { params } = ctx.oidc;
                if (params?.grant_type === 'client_credentials') {
                    // No `scope`: every scope the client is allowed (the grant reads
                    // params.scope after this hook). A scope it may not have: invalid_scope.
                    if (!params.scope) params.scope = scope || undefined;
                    const allowed = new Set(scope.split(' '));
                    const refused = (params.scope ?? '').split(' ').filter(s => s && !allowed.has(s));
                    if (refused.length) throw new errors.InvalidScope('requested scope is not allowed', refused.join(' '));
                }
                return { scope, audience: resource, accessTokenFormat: 'jwt', accessTokenTTL: ttl, jwt: { sign: { alg: 'RS256' } } };
            }
        }
    }
});
// ---------- token exchange (RFC 8693) ----------
const { jwtVerify, importJWK } = await import(pathToFileURL(join(TOOLS, 'oauth', 'node_modules', 'jose', 'dist', 'webapi', 'index.js')).href);
const { d, p, q, dp, dq, qi, ...publicJwk } = jwk;
const verifyKey = await importJWK(publicJwk, 'RS256');
provider.registerGrantType(TOKEN_EXCHANGE, async ctx => {
    const { params, client } = ctx.oidc;
    if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
        throw new errors.InvalidRequest(`subject_token_type must be ${ACCESS_TOKEN_TYPE}`);
    }
    if (params.requested_token_type && params.requested_token_type !== ACCESS_TOKEN_TYPE) {
        throw new errors.InvalidRequest(`only ${ACCESS_TOKEN_TYPE} is issued`);
    }
    let subject;
    try {
        ({ payload: subject } = await jwtVerify(params.subject_token, verifyKey, { issuer }));
    } catch (e) {
        throw new errors.InvalidGrant(`the subject token does not verify: ${e.code ?? e.message}`);
    }
    const audience = params.resource || params.audience;
    if (!audience) throw new errors.InvalidTarget('resource or audience is required');
    const held = new Set((subject.scope ?? '').split(' ').filter(Boolean));
    const asked = params.scope ? params.scope.split(' ').filter(Boolean) : [...held];
    const scope = asked.filter(s => held.has(s));
    if (!scope.length) throw new errors.InvalidScope('the subject token holds none of the scope asked for', params.scope);
    const lifetime = Math.max(1, Math.min(ttl, subject.exp - Math.floor(Date.now() / 1000)));
    const token = new provider.AccessToken({
        accountId: subject.sub,
        client,
        scope: scope.join(' '),
        gty: 'token_exchange',
        expiresIn: lifetime,
        resourceServer: { audience, scope: scope.join(' '), accessTokenFormat: 'jwt', accessTokenTTL: lifetime, jwt: { sign: { alg: 'RS256' } } }
    });
    const value = await token.save();
    ctx.body = {
        access_token: value,
        issued_token_type: ACCESS_TOKEN_TYPE,
        token_type: 'Bearer',
        expires_in: token.expiration,
        scope: scope.join(' ')
    };
}, ['subject_token', 'subject_token_type', 'requested_token_type', 'audience', 'resource', 'scope']);

provider.on('server_error', (ctx, err) => console.error('server_error:', err));
provider.on('grant.error', (ctx, err) => console.error(`token error: ${err.message} (${err.error_description ?? ''})`));
server.on('request', provider.callback());

process.stdout.write(JSON.stringify({ url: issuer, issuer, port: realPort, kid }) + '\n');
for (const signal of ['SIGTERM', 'SIGINT']) {
    process.on(signal, () => {
        server.close();
        server.closeAllConnections();
        process.exit(0);
    });
}
