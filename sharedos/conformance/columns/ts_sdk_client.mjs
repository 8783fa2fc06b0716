// A plain MCP client on the official TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// tools/package.json), driven by the conformance client column (client.py beside this file)
// and the tests (tests/clients): it connects over streamable HTTP (with headers)
// or stdio (a command it launches), lists the tools, every page (which caches their outputSchema
// validators, as every SDK client does), makes the calls it is given, and prints one JSON
// document: what the SDK handed back for each call, or the error it threw.
//
// Usage: node ts_sdk_client.mjs < spec.json, with SHAREDOS_NODE_MODULES naming the
// node_modules directory that holds the SDK. The spec (stdin, so a token never sits on a
// command line): {"transport": "http"|"stdio", "url", "headers", "command", "args",
// "env", "timeoutMs", "calls": [{"name", "arguments"}]}. ``timeoutMs`` is each request's
// limit (initialize, tools/list, tools/call): the SDK's own default, 60 s, is shorter than a
// stdio bridge's start or a call's answer on a saturated machine, and a request it gave up on
// was graded as no answer (or an answer never seen) though the kernel had recorded it.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.SHAREDOS_NODE_MODULES;
if (!modules) {
  process.stderr.write("SHAREDOS_NODE_MODULES is not set\n");
  process.exit(2);
}
const sdk = (rel) => import(pathToFileURL(join(modules, "@modelcontextprotocol/sdk/dist/esm", rel)).href);
const { Client } = await sdk("client/index.js");
const spec = JSON.parse(readFileSync(0, "utf8"));

let transport;
if (spec.transport === "stdio") {
  const { StdioClientTransport, getDefaultEnvironment } = await sdk("client/stdio.js");
  transport = new StdioClientTransport({
    command: spec.command,
    args: spec.args ?? [],
    env: { ...getDefaultEnvironment(), ...(spec.env ?? {}) },
    stderr: "inherit",
  });
} else {
  const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
  transport = new StreamableHTTPClientTransport(new URL(spec.url), {
    requestInit: { headers: spec.headers ?? {} },
  });
}

const client = new Client({ name: "sharedos-ts-sdk-probe", version: "1.0.0" });
const requestOptions = Number.isFinite(spec.timeoutMs) && spec.timeoutMs > 0 ? { timeout: spec.timeoutMs } : {};
const out = { results: [] };
try {
  await client.connect(transport, requestOptions);
  out.protocolVersion = transport.protocolVersion ?? null;
  // listTools() answers one page, and the SDK (1.32) replaces its outputSchema validators
  // with that page's on every call: a client that stops at the first page, or walks them
  // all, validates only one page's results. So every page is read (a cursor seen twice ends
  // the walk) and the whole listing is cached once more, so every tool's results are checked.
  const tools = [];
  const seen = new Set();
  let cursor;
  do {
    const listed = await client.listTools(cursor === undefined ? undefined : { cursor }, requestOptions);
    tools.push(...listed.tools);
    cursor = listed.nextCursor;
    if (cursor !== undefined && seen.has(cursor)) throw new Error(`tools/list repeated the cursor ${cursor}`);
    if (cursor !== undefined) seen.add(cursor);
  } while (cursor !== undefined);
  if (typeof client.cacheToolMetadata === "function") client.cacheToolMetadata(tools);
  const validator = (name) =>
    typeof client.getToolOutputValidator === "function" ? Boolean(client.getToolOutputValidator(name)) : null;
  out.tools = tools.map((t) => ({
    name: t.name,
    hasOutputSchema: Boolean(t.outputSchema),
    validated: validator(t.name),
  }));
  for (const call of spec.calls ?? []) {
    try {
      const result = await client.callTool(
        { name: call.name, arguments: call.arguments ?? {} },
        undefined,
        requestOptions,
      );
      out.results.push({ name: call.name, ok: true, result });
    } catch (error) {
      out.results.push({
        name: call.name,
        ok: false,
        error: { code: error?.code ?? null, message: String(error?.message ?? error) },
      });
    }
  }
} catch (error) {
  out.fatal = String(error?.message ?? error);
} finally {
  try {
    await client.close();
  } catch {
    // closing a transport whose peer already left is not a result
  }
}
// Exit only once the document is written: stdout is a pipe, which Node writes
// asynchronously, and process.exit() right after write() dropped all but the first
// 64-128 KiB of a larger document (the column then read no answer for any call).
const code = out.fatal ? 1 : 0;
process.stdout.write(JSON.stringify(out) + "\n", () => process.exit(code));
