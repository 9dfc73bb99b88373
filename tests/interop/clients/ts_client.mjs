// A real MCP 2025-11-25 client (the official TypeScript SDK) run through the proxy.
//
// Usage: node ts_client.mjs URL   (env MCP_SDK_NODE_MODULES: a node_modules folder that
// holds @modelcontextprotocol/sdk). Exercises tools (with progress and a sampling request
// from the server), resources and prompts, then prints one JSON object with what it saw.
import path from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.MCP_SDK_NODE_MODULES;
if (!modules) throw new Error("MCP_SDK_NODE_MODULES is not set");
const load = (p) =>
  import(pathToFileURL(path.join(modules, "@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
const { CreateMessageRequestSchema } = await load("types.js");

const url = new URL(process.argv[2]);
const client = new Client(
  { name: "ts-interop-client", version: "1.0.0" },
  { capabilities: { sampling: {} } },
);
client.setRequestHandler(CreateMessageRequestSchema, async (request) => ({
  role: "assistant",
  content: { type: "text", text: `sampled: ${request.params.messages[0]?.content?.text ?? ""}` },
  model: "ts-test-model",
  stopReason: "endTurn",
}));
const transport = new StreamableHTTPClientTransport(url);
await client.connect(transport);

const seen = {
  server: client.getServerVersion()?.name,
  protocolVersion: transport.protocolVersion,
  sessionId: transport.sessionId,
};
const tools = await client.listTools();
seen.tools = tools.tools.map((t) => t.name).sort();
const echo = await client.callTool({ name: "echo", arguments: { message: "from typescript" } });
seen.echo = echo.content[0].text;

const progress = [];
const done = await client.callTool(
  { name: "trigger-long-running-operation", arguments: { duration: 0.6, steps: 3 } },
  undefined,
  { onprogress: (p) => progress.push(p.progress) },
);
seen.progress = progress;
seen.longRunning = done.content[0].text;
if (seen.tools.includes("trigger-sampling-request")) {
  const sampled = await client.callTool({
    name: "trigger-sampling-request",
    arguments: { prompt: "hello", maxTokens: 20 },
  });
  seen.sampling = sampled.content.map((c) => c.text ?? "").join(" ");
}
const resources = await client.listResources();
seen.resources = resources.resources.length;
const read = await client.readResource({ uri: resources.resources[0].uri });
seen.read = { uri: resources.resources[0].uri, contents: read.contents.length };
const prompts = await client.listPrompts();
seen.prompts = prompts.prompts.map((p) => p.name).sort();
const simple = prompts.prompts.find((p) => !p.arguments || p.arguments.length === 0);
const prompt = await client.getPrompt({ name: simple.name });
seen.prompt = { name: simple.name, messages: prompt.messages.length };
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(seen));
