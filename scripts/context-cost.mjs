#!/usr/bin/env node
// What a client pays in context for the tools it is offered (issue 27): the
// size of the tools/list result, in bytes and in tokens (gpt-tokenizer's
// o200k_base encoding, shipped with the package: nothing is downloaded), for
// a catalogue of 300+ tools assembled from real servers (the reference
// server-everything, server-filesystem and server-memory, and the project's
// fixture with generated tools), a virtual server of a few of them, and the
// same tools in search mode.
//
// Needs `cargo build --release` (mcp-warden and the fixture) and `npm install`
// in tests/interop. Run: node scripts/context-cost.mjs [path/to/target/release]

import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const bin = resolve(process.argv[2] ?? join(root, "target", "release"));
const interop = join(root, "tests", "interop");
const modules = join(interop, "node_modules");
const { encode } = await import(
  pathToFileURL(join(modules, "gpt-tokenizer", "esm", "main.js")).href
);
const server = (name) => join(modules, "@modelcontextprotocol", name, "dist", "index.js");

const dir = mkdtempSync(join(tmpdir(), "context-cost-"));
const FEW = ["everything.echo", "fs.read_text_file", "fs.list_directory", "memory.search_nodes", "memory.create_entities"];
const config = `
[gateway]
anonymous_caller = "dev"

[[upstream]]
name = "everything"
command = ["node", ${JSON.stringify(server("server-everything"))}, "stdio"]

[[upstream]]
name = "fs"
command = ["node", ${JSON.stringify(server("server-filesystem"))}, ${JSON.stringify(dir)}]

[[upstream]]
name = "memory"
command = ["node", ${JSON.stringify(server("server-memory"))}]
env = { MEMORY_FILE_PATH = ${JSON.stringify(join(dir, "memory.jsonl"))} }

[[upstream]]
name = "fx"
command = [${JSON.stringify(join(bin, "warden-fixture-upstream"))}]
env = { FIXTURE_EXTRA_TOOLS = "280" }

[[server]]
name = "few"
tools = ${JSON.stringify(FEW)}

[[server]]
name = "find"
tools = ["*"]
discovery = "search"
`;
const path = join(dir, "warden.toml");
writeFileSync(path, config);

/// The tools/list result the gateway gives over stdio, run with `args`.
function listing(args) {
  return new Promise((done, fail) => {
    const child = spawn(join(bin, "mcp-warden"), ["run", "--config", path, ...args], {
      stdio: ["pipe", "pipe", "inherit"],
      env: { ...process.env, RUST_LOG: "error" },
    });
    const send = (msg) => child.stdin.write(JSON.stringify(msg) + "\n");
    const lines = createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      const msg = JSON.parse(line);
      if (msg.id === 1) {
        send({ jsonrpc: "2.0", method: "notifications/initialized" });
        send({ jsonrpc: "2.0", id: 2, method: "tools/list" });
      } else if (msg.id === 2) {
        child.stdin.end(); // the gateway stops its upstreams and exits
        child.on("exit", () =>
          msg.result ? done(msg.result) : fail(new Error(JSON.stringify(msg))));
      }
    });
    send({
      jsonrpc: "2.0", id: 1, method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "context-cost", version: "1" } },
    });
  });
}

const rows = [
  ["whole catalogue (/mcp)", []],
  [`virtual server, ${FEW.length} tools (/mcp/few)`, ["--server", "few"]],
  ["search mode over every tool (/mcp/find)", ["--server", "find"]],
];
console.log("listing                                    tools     bytes    tokens (o200k_base)");
for (const [what, args] of rows) {
  const result = await listing(args);
  const text = JSON.stringify(result.tools);
  const bytes = Buffer.byteLength(text);
  const tokens = encode(text).length;
  console.log(`${what.padEnd(42)} ${String(result.tools.length).padStart(5)} ${String(bytes).padStart(9)} ${String(tokens).padStart(9)}`);
}
