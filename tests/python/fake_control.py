"""What every platform fake in this folder shares: its control API's
plumbing (a JSON body, a `/_test/wait` that answers once enough has been
recorded) and its life as a child process (listen, print the ready line,
serve until SIGTERM, shut down cleanly).

The fakes run as scripts (`python tests/python/fake_slack.py`), so this
module is found beside them.
"""

import asyncio
import json
import signal
import time
from typing import Awaitable, Callable

from aiohttp import web


async def json_body(request) -> dict:
    """The request's JSON object body ({} when empty); 400 otherwise."""
    raw = await request.read()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=json.dumps({"error": "body is not JSON"}), content_type="application/json")
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text=json.dumps({"error": "body is not an object"}), content_type="application/json")
    return body


async def wait_for(changed: asyncio.Condition, items: Callable[[], list], count: int, timeout: float):
    """Answers `{"count", "items"}` once `items()` holds `count` entries
    (200), or with what it holds when `timeout` seconds passed (408).
    `changed` is notified whenever the fake records something."""
    deadline = time.monotonic() + timeout
    async with changed:
        while True:
            found = items()
            if len(found) >= count:
                return web.json_response({"count": len(found), "items": found})
            left = deadline - time.monotonic()
            if left <= 0:
                return web.json_response({"count": len(found), "items": found}, status=408)
            try:
                await asyncio.wait_for(changed.wait(), timeout=left)
            except asyncio.TimeoutError:
                pass


async def serve(
    app: web.Application,
    host: str,
    port: int,
    ready: Callable[[int, str, str], dict],
    shutdown: Callable[[], Awaitable[None]],
) -> None:
    """Listens on `host:port` (0: any free port), prints the line `ready(port,
    shown_host, base_url)` returns, as JSON, then serves until SIGTERM or
    SIGINT and calls `shutdown` before closing."""
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    shown = host if ":" not in host else f"[{host}]"
    print(json.dumps(ready(bound, shown, f"http://{shown}:{bound}")), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await shutdown()
    await runner.cleanup()
