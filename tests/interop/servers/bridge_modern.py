"""A 2026-07-28 MCP server on the official Python SDK (MCPServer), over stdio: the
new-revision upstream of test_bridge.py. Every feature the bridge carries, the
2026-07-28 way (input requests in an `InputRequiredResult`, logging by per-request
opt-in, no server-to-client requests).

Usage: bridge_modern.py RECORD_FILE (where `wait_for_cancel` notes that it was
cancelled, one line per call).

- `sample(topic)`: samples the client's model, answers `sampled: <its text>`.
- `ask(question)`: a form elicitation for a colour, answers `accept: <colour>`.
- `open_url(url)`: a URL-mode elicitation, answers `url: <action>`.
- `chatter(text)`: logs `<level>: <text>` at debug, info and warning.
- `count(steps)`: reports progress 1..steps of steps.
- `wait_for_cancel(tag)`: reports progress 0, then waits until cancelled.
- prompt `modern_greeting(language)`, whose `language` completes.
"""

import sys
import warnings
from pathlib import Path
from typing import Annotated

import anyio
from mcp_types import (
    Completion,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestURLParams,
    InputRequiredResult,
    PromptReference,
    SamplingMessage,
    TextContent,
)
from pydantic import BaseModel

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve, Sample
from mcp.shared.exceptions import MCPDeprecationWarning

# Logging is deprecated at 2026-07-28 but still part of it (per-request opt-in).
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

RECORD = Path(sys.argv[1])
LANGUAGES = ["french", "finnish", "german"]

mcp = MCPServer("bridge-modern")


class Color(BaseModel):
    color: str


def ask_for_a_color(question: str) -> Elicit[Color]:
    return Elicit(question, Color)


def ask_the_model(topic: str) -> Sample:
    text = TextContent(type="text", text=f"Write about {topic}")
    return Sample([SamplingMessage(role="user", content=text)], max_tokens=50)


@mcp.tool()
def sample(topic: str, reply: Annotated[CreateMessageResult, Resolve(ask_the_model)]) -> str:
    """Samples the client's model."""
    return f"sampled: {reply.content.text}"


@mcp.tool()
def ask(question: str, answer: Annotated[Color, Resolve(ask_for_a_color)]) -> str:
    """Asks the user for a colour (form mode)."""
    return f"accept: {answer.color}"


@mcp.tool()
def open_url(url: str, ctx: Context) -> str | InputRequiredResult:
    """Sends the user to a URL (URL mode), by hand: there is no resolver marker for it."""
    answer = (ctx.input_responses or {}).get("login")
    if answer is None:
        request = ElicitRequest(params=ElicitRequestURLParams(message="Sign in, please", url=url))
        return InputRequiredResult(input_requests={"login": request}, request_state="asked-login")
    return f"url: {answer.action}"


@mcp.tool()
async def chatter(text: str, ctx: Context) -> str:
    """Logs the text at debug, info and warning."""
    for level in ("debug", "info", "warning"):
        await ctx.log(level, f"{level}: {text}", logger_name="modern")
    return "logged"


@mcp.tool()
async def count(steps: int, ctx: Context) -> str:
    """Reports progress from 1 to `steps`."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}")
    return f"counted {steps}"


@mcp.tool()
async def wait_for_cancel(tag: str, ctx: Context) -> str:
    """Reports progress 0 (it is waiting), then waits until the call is cancelled."""
    try:
        await ctx.report_progress(0, 1, "waiting")
        with anyio.fail_after(30):
            await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        with RECORD.open("a") as f:
            f.write(f"cancelled {tag}\n")
        raise
    return "never cancelled"


@mcp.prompt()
def modern_greeting(language: str) -> str:
    """A greeting in a language."""
    return f"Say hello in {language}."


@mcp.completion()
async def complete(ref, argument, context):
    if isinstance(ref, PromptReference) and ref.name == "modern_greeting" and argument.name == "language":
        return Completion(values=[lang for lang in LANGUAGES if lang.startswith(argument.value)])
    return None


if __name__ == "__main__":
    mcp.run()
