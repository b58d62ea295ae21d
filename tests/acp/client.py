"""An editor's side of `agentd acp`, driven by the ACP's own Python SDK (PyPI
`agent-client-protocol`, pinned by the test that runs this): it starts `agentd acp`, runs the
session the test scripts, and prints everything it saw as one JSON object on stdout for the test
to check. Nothing here judges; the Rust test does.

    python client.py AGENTD HOME WORKSPACE
"""

import asyncio
import json
import sys

from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    Implementation,
    RequestPermissionResponse,
)
from acp.stdio import spawn_agent_process


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class Editor:
    """Keeps every update, and answers a permission request by rejecting it."""

    def __init__(self):
        self.updates = []
        self.permissions = []

    def take(self):
        taken, self.updates = self.updates, []
        return taken

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(dump(update))

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append({"tool_call": dump(tool_call), "options": [dump(o) for o in options]})
        reject = next((o for o in options if o.kind.startswith("reject")), None)
        if reject is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=reject.option_id))

    async def write_text_file(self, *args, **kwargs):
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(self, *args, **kwargs):
        raise RequestError.method_not_found("fs/read_text_file")

    async def create_terminal(self, *args, **kwargs):
        raise RequestError.method_not_found("terminal/create")

    async def terminal_output(self, *args, **kwargs):
        raise RequestError.method_not_found("terminal/output")

    async def release_terminal(self, *args, **kwargs):
        raise RequestError.method_not_found("terminal/release")

    async def wait_for_terminal_exit(self, *args, **kwargs):
        raise RequestError.method_not_found("terminal/wait_for_exit")

    async def kill_terminal(self, *args, **kwargs):
        raise RequestError.method_not_found("terminal/kill")

    async def ext_method(self, method, params):
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method, params):
        pass


def error_of(e):
    return {"code": getattr(e, "code", None), "message": str(e), "data": getattr(e, "data", None)}


async def prompt(conn, editor, session_id, words):
    answer = await conn.prompt(session_id=session_id, prompt=[text_block(words)])
    return {"answer": dump(answer), "updates": editor.take()}


async def main(agentd, home, workspace):
    out = {}
    editor = Editor()
    async with spawn_agent_process(editor, agentd, "--home", home, "acp") as (conn, process):
        init = await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(),
            client_info=Implementation(name="agentd-e2e", version="1"),
        )
        out["initialize"] = dump(init)
        # None is offered and none is needed; asked anyway, it is answered with nothing to do.
        authenticated = await conn.authenticate(method_id="none")
        out["authenticate"] = dump(authenticated) if authenticated is not None else {}
        try:
            await conn.new_session(cwd="/", mcp_servers=[])
            out["refused_cwd"] = None
        except RequestError as e:
            out["refused_cwd"] = error_of(e)
        session = await conn.new_session(cwd=workspace, mcp_servers=[])
        sid = session.session_id
        out["session_id"] = sid
        out["first"] = await prompt(conn, editor, sid, "Have the coder read the data")
        out["follow_up"] = await prompt(conn, editor, sid, "Anything else?")
        out["rejected"] = await prompt(conn, editor, sid, "Now fix the adder")
        out["permissions"] = editor.permissions
        # A prompt cancelled while the model thinks.
        running = asyncio.ensure_future(
            conn.prompt(session_id=sid, prompt=[text_block("Think forever")])
        )
        await asyncio.sleep(2)
        await conn.cancel(session_id=sid)
        cancelled = await asyncio.wait_for(running, 30)
        out["cancelled"] = {"answer": dump(cancelled), "updates": editor.take()}
    # Another editor (a restart) loads the session: its history replayed.
    other = Editor()
    async with spawn_agent_process(other, agentd, "--home", home, "acp") as (conn, process):
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities())
        loaded = await conn.load_session(cwd=workspace, session_id=sid, mcp_servers=[])
        out["load"] = {"answer": dump(loaded) if loaded else None, "updates": other.take()}
        try:
            await conn.load_session(cwd=workspace, session_id="0190aaaa-0000-7000-8000-000000000000", mcp_servers=[])
            out["load_unknown"] = None
        except RequestError as e:
            out["load_unknown"] = error_of(e)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
