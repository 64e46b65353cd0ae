// A 2025-11-25 MCP server on the official TypeScript SDK (McpServer), over stdio:
// the old-revision upstream of test_bridge.py. Every feature the bridge carries,
// the 2025-11-25 way (server-to-client requests mid-call, logging/setLevel).
//
// Usage: node legacy_upstream.mjs RECORD_FILE (where `wait_for_cancel` notes that
// it was cancelled, one line per call).
//
// - sample(topic): samples the client's model, answers `sampled: <its text>`.
// - ask(question): a form elicitation for a colour, answers `accept: <colour>`.
// - open_url(url): a URL-mode elicitation, answers `url: <action>`.
// - chatter(text): logs `<level>: <text>` at debug, info and warning (the SDK
//   drops what is below the level a logging/setLevel asked for).
// - count(steps): reports progress 1..steps of steps.
// - wait_for_cancel(tag): reports progress 0, then waits until cancelled.
// - prompt legacy_greeting(language), whose `language` completes.

import { appendFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { completable } from "@modelcontextprotocol/sdk/server/completable.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const RECORD = process.argv[2];
const LANGUAGES = ["french", "finnish", "german"];

const server = new McpServer(
  { name: "legacy-upstream", version: "1.0.0" },
  { capabilities: { logging: {} } },
);
const text = (t) => ({ content: [{ type: "text", text: t }] });

server.registerTool(
  "sample",
  { description: "Samples the client's model.", inputSchema: { topic: z.string() } },
  async ({ topic }, extra) => {
    const reply = await server.server.createMessage(
      { messages: [{ role: "user", content: { type: "text", text: `Write about ${topic}` } }], maxTokens: 50 },
      { relatedRequestId: extra.requestId },
    );
    return text(`sampled: ${reply.content.text}`);
  },
);

server.registerTool(
  "ask",
  { description: "Asks the user for a colour (form mode).", inputSchema: { question: z.string() } },
  async ({ question }, extra) => {
    const answer = await server.server.elicitInput(
      {
        mode: "form",
        message: question,
        requestedSchema: { type: "object", properties: { color: { type: "string" } }, required: ["color"] },
      },
      { relatedRequestId: extra.requestId },
    );
    return text(`${answer.action}: ${answer.content?.color}`);
  },
);

server.registerTool(
  "open_url",
  { description: "Sends the user to a URL (URL mode).", inputSchema: { url: z.string() } },
  async ({ url }, extra) => {
    const answer = await server.server.elicitInput(
      { mode: "url", message: "Sign in, please", url, elicitationId: "login-1" },
      { relatedRequestId: extra.requestId },
    );
    return text(`url: ${answer.action}`);
  },
);

server.registerTool(
  "chatter",
  { description: "Logs the text at debug, info and warning.", inputSchema: { text: z.string() } },
  async (args, extra) => {
    for (const level of ["debug", "info", "warning"]) {
      await server.sendLoggingMessage({ level, logger: "legacy", data: `${level}: ${args.text}` }, extra.sessionId);
    }
    return text("logged");
  },
);

async function progress(extra, progress, total, message) {
  const progressToken = extra._meta?.progressToken;
  if (progressToken === undefined) return;
  await extra.sendNotification({
    method: "notifications/progress",
    params: { progressToken, progress, total, message },
  });
}

server.registerTool(
  "count",
  { description: "Reports progress from 1 to steps.", inputSchema: { steps: z.number().int() } },
  async ({ steps }, extra) => {
    for (let i = 1; i <= steps; i++) await progress(extra, i, steps, `step ${i}`);
    return text(`counted ${steps}`);
  },
);

server.registerTool(
  "wait_for_cancel",
  { description: "Reports progress 0, then waits until the call is cancelled.", inputSchema: { tag: z.string() } },
  async ({ tag }, extra) => {
    const cancelled = new Promise((resolve) => extra.signal.addEventListener("abort", resolve, { once: true }));
    await progress(extra, 0, 1, "waiting");
    let timer;
    const timedOut = await Promise.race([
      cancelled.then(() => false),
      new Promise((resolve) => (timer = setTimeout(resolve, 30000, true))),
    ]);
    clearTimeout(timer);
    if (timedOut) return text("never cancelled");
    appendFileSync(RECORD, `cancelled ${tag}\n`);
    return text("cancelled");
  },
);

server.registerPrompt(
  "legacy_greeting",
  {
    description: "A greeting in a language.",
    argsSchema: { language: completable(z.string(), (value) => LANGUAGES.filter((l) => l.startsWith(value))) },
  },
  ({ language }) => ({ messages: [{ role: "user", content: { type: "text", text: `Say hello in ${language}.` } }] }),
);

await server.connect(new StdioServerTransport());
