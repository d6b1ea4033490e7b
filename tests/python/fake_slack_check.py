"""Checks fake_slack.py against Slack's own client code (the official `slack_sdk`).

Usage: fake_slack_check.py
Starts the fake as a subprocess, drives it with slack_sdk's WebClient, its aiohttp
SocketModeClient and SignatureVerifier (plus a raw aiohttp WebSocket for what an SDK hides),
prints one line per check and exits 0 only if every check held.
"""

import asyncio
import json
import os
import sys
import time
import traceback
import urllib.request

import aiohttp
from aiohttp import web
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

BOT = "xoxb-fake-bot-token"
APP = "xapp-1-fake-app-token"
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
HERE = os.path.dirname(os.path.abspath(__file__))

failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures.append(name)


def ctl(control, path, body=None, method=None):
    """A synchronous control call: (status, JSON answer)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(control + path, data=data, method=method or ("POST" if data else "GET"))
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as error:
        raw = error.read() or b"{}"
        try:
            return error.code, json.loads(raw)
        except ValueError:
            return error.code, {"error": raw.decode("utf-8", "replace"), "path": path}


async def actl(control, path, body=None, method=None):
    return await asyncio.to_thread(ctl, control, path, body, method)


def web_api(api_base, control):
    client = WebClient(token=BOT, base_url=api_base + "/")
    me = client.auth_test()
    check("auth.test answers the fake's ids", me["user_id"] == "U0BOT" and me["team_id"] == "T0TEAM"
          and me["bot_id"] == "B0BOT", me.data)
    for token, error in (("xoxb-wrong", "invalid_auth"), (None, "not_authed")):
        try:
            WebClient(token=token, base_url=api_base + "/").auth_test()
            check(f"auth.test with token {token} fails", False, "no SlackApiError")
        except SlackApiError as e:
            check(f"auth.test with token {token} -> {error}", e.response["error"] == error
                  and e.response.status_code == 200, e.response.data)

    first = client.chat_postMessage(channel="C0CHAN", text="hello *world*", mrkdwn=False)
    second = client.chat_postMessage(channel="D0DM", text="in a thread", thread_ts=first["ts"])
    check("chat.postMessage gives fresh increasing ts", first["ts"] == "1700000000.000100"
          and second["ts"] == "1700000000.000200", [first["ts"], second["ts"]])
    check("chat.postMessage answers the message", second["message"]["text"] == "in a thread"
          and second["message"]["thread_ts"] == first["ts"] and second["channel"] == "D0DM",
          second.data)
    _, calls = ctl(control, "/calls?method=chat.postMessage")
    calls = calls["calls"]
    headers = dict((k.lower(), v) for k, v in calls[1]["headers"])
    check("the fake records the calls", len(calls) == 2 and calls[0]["mrkdwn"] is False
          and calls[1]["thread_ts"] == first["ts"] and headers.get("authorization") == f"Bearer {BOT}"
          and json.loads(calls[1]["raw_body"])["text"] == "in a thread", calls)
    for kwargs, error in (({"channel": "general-chat", "text": "x"}, "channel_not_found"),
                          ({"channel": "C0CHAN", "text": "x" * 40_001}, "msg_too_long")):
        try:
            client.chat_postMessage(**kwargs)
            check(f"chat.postMessage -> {error}", False, "no SlackApiError")
        except SlackApiError as e:
            check(f"chat.postMessage -> {error}", e.response["error"] == error, e.response.data)

    ctl(control, "/ratelimit", {"method": "chat.postMessage", "count": 1, "retry_after": 7})
    try:
        client.chat_postMessage(channel="C0CHAN", text="too fast")
        check("chat.postMessage rate limited", False, "no SlackApiError")
    except SlackApiError as e:
        retry_after = int(e.response.headers.get("Retry-After", e.response.headers.get("retry-after", -1)))
        check("chat.postMessage 429 with Retry-After", e.response.status_code == 429 and retry_after == 7
              and e.response["error"] == "ratelimited", (e.response.status_code, e.response.headers))
    after = client.chat_postMessage(channel="C0CHAN", text="slower")
    _, calls = ctl(control, "/calls?method=chat.postMessage")
    limited = [c["rate_limited"] for c in calls["calls"]]
    check("only the armed call was refused, and both were recorded", after["ok"]
          and limited[-2:] == [True, False], limited)

    opened = client.apps_connections_open(app_token=APP)
    check("apps.connections.open gives a ws URL", opened["url"].startswith(api_base.replace("http", "ws")[:-4] + "/link/?ticket=")
          and opened["url"].endswith("&app_id=A0APP"), opened.data)
    try:
        client.apps_connections_open(app_token=BOT)
        check("apps.connections.open with a bot token fails", False, "no SlackApiError")
    except SlackApiError as e:
        check("apps.connections.open with a bot token -> not_allowed_token_type",
              e.response["error"] == "not_allowed_token_type", e.response.data)

    # Block Kit, built with slack_sdk's own models: posted, replaced, refused when Slack would.
    from slack_sdk.models.blocks import ActionsBlock, ButtonElement, SectionBlock
    blocks = [SectionBlock(text="approve *this*?"),
              ActionsBlock(block_id="b", elements=[ButtonElement(text="Approve", action_id="a:once",
                                                                 value="a:once", style="primary")])]
    asked = client.chat_postMessage(channel="C0CHAN", text="approve this?", blocks=blocks)
    check("chat.postMessage keeps the blocks", asked["message"]["blocks"][1]["elements"][0]["action_id"]
          == "a:once", asked.data)
    updated = client.chat_update(channel="C0CHAN", ts=asked["ts"], text="approved",
                                 blocks=[SectionBlock(text="approved")])
    check("chat.update replaces text and blocks", updated["ts"] == asked["ts"]
          and updated["text"] == "approved" and len(updated["message"]["blocks"]) == 1, updated.data)
    kept = client.chat_update(channel="C0CHAN", ts=asked["ts"], text="again")
    check("chat.update without blocks keeps the old ones", len(kept["message"]["blocks"]) == 1, kept.data)
    for call, kwargs, error in (
            (client.chat_update, {"channel": "C0CHAN", "ts": "1.000001", "text": "x"}, "message_not_found"),
            (client.chat_postMessage, {"channel": "C0CHAN", "text": "x",
                                       "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "y" * 3001}}]},
             "invalid_blocks"),
            (client.chat_postEphemeral, {"channel": "C0CHAN", "user": "U0NOTHERE", "text": "x"},
             "user_not_in_channel")):
        try:
            call(**kwargs)
            check(f"{call.__name__} -> {error}", False, "no SlackApiError")
        except SlackApiError as e:
            check(f"{call.__name__} -> {error}", e.response["error"] == error, e.response.data)
    only = client.chat_postEphemeral(channel="C0CHAN", user="U0USER", text="only you")
    check("chat.postEphemeral answers a message_ts", only["message_ts"].startswith("17"), only.data)

    client.reactions_add(channel="C0CHAN", timestamp=first["ts"], name="eyes")
    results = []
    for call in (client.reactions_add, client.reactions_remove, client.reactions_remove):
        try:
            call(channel="C0CHAN", timestamp=first["ts"], name="eyes")
            results.append("ok")
        except SlackApiError as e:
            results.append(e.response["error"])
    check("reactions: already_reacted, removed, no_reaction", results == ["already_reacted", "ok", "no_reaction"],
          results)
    try:
        client.api_call("conversations.frobnicate")
        check("unknown method fails", False, "no SlackApiError")
    except SlackApiError as e:
        check("unknown method -> unknown_method", e.response["error"] == "unknown_method", e.response.data)


async def socket_mode(api_base, control):
    received = []

    async def listener(client, req):
        received.append(req)
        event = req.payload.get("event", {})
        if "do not ack" in event.get("text", "") and req.retry_attempt == 0:
            return  # the fake must redeliver it
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    web_client = AsyncWebClient(token=BOT, base_url=api_base + "/")
    client = SocketModeClient(app_token=APP, web_client=web_client, ping_interval=1)
    client.socket_mode_request_listeners.append(listener)
    await client.connect()
    try:
        _, waited = await actl(control, "/wait?what=connections&count=1&timeout=5")
        check("SocketModeClient connected through apps.connections.open", waited.get("count") == 1, waited)

        status, pushed = await actl(control, "/socket/push", {"kind": "dm", "text": "hi pincer", "user": "U0ALICE"})
        _, acks = await actl(control, "/wait?what=acks&count=1&timeout=5")
        req = next((r for r in received if r.envelope_id == pushed["envelope_id"]), None)
        check("events_api envelope received", req is not None and req.type == "events_api"
              and req.payload["event"]["channel_type"] == "im" and req.payload["event"]["text"] == "hi pincer"
              and req.payload["event_id"] == pushed["event_id"] and req.retry_attempt == 0,
              [(r.type, r.payload) for r in received])
        ack = (acks.get("items") or [{}])[0]
        check("the fake recorded the ack with its delay", ack.get("envelope_id") == pushed["envelope_id"]
              and ack.get("delay_ms") is not None and ack["delay_ms"] < 3000 and not ack.get("late"), acks)

        status, pushed = await actl(control, "/socket/push", {"kind": "mention", "text": "do not ack"})
        _, acks = await actl(control, "/wait?what=acks&count=2&timeout=8")
        mine = [r for r in received if r.envelope_id == pushed["envelope_id"]]
        check("an unacked envelope is redelivered with retry_attempt 1, reason timeout",
              [(r.retry_attempt, r.retry_reason) for r in mine] == [(0, ""), (1, "timeout")]
              and mine[0].payload["event"]["text"] == "<@U0BOT> do not ack",
              [(r.retry_attempt, r.retry_reason) for r in mine])
        check("the redelivery's ack is recorded", len(acks.get("items", [])) == 2
              and acks["items"][1]["retry_attempt"] == 1, acks)

        for kind in ("slash", "interactive"):
            status, pushed = await actl(control, "/socket/push", {"kind": kind, "text": "do it"})
            await actl(control, "/wait?what=acks&count=%d&timeout=5" % (3 if kind == "slash" else 4))
            req = next((r for r in received if r.envelope_id == pushed["envelope_id"]), None)
            expected = {"slash": "slash_commands", "interactive": "interactive"}[kind]
            check(f"{expected} envelope received", req is not None and req.type == expected
                  and req.accepts_response_payload, req and req.to_dict())
            if kind == "interactive" and req is not None:
                click = req.payload
                check("a click is a block_actions payload on a message", click["type"] == "block_actions"
                      and click["container"]["type"] == "message" and click["user"]["id"]
                      and click["actions"][0]["type"] == "button" and click["actions"][0]["action_ts"],
                      click)

        # Deaf: the socket stays open but nothing comes through and pings go unanswered; the
        # SDK's heartbeat notices, reconnects, and the envelope pushed meanwhile is redelivered.
        _, conns = await actl(control, "/connections")
        deaf_id = conns["connections"][-1]["id"]
        await actl(control, "/socket/deaf", {"on": True})
        status, pushed = await actl(control, "/socket/push", {"kind": "dm", "text": "while deaf"})
        _, acks = await actl(control, "/wait?what=acks&count=5&timeout=15")
        mine = [r for r in received if r.envelope_id == pushed["envelope_id"]]
        _, conns = await actl(control, "/connections")
        deaf = next(c for c in conns["connections"] if c["id"] == deaf_id)
        check("deaf: swallowed, then redelivered on the next connection after reconnecting",
              [(r.retry_attempt, r.retry_reason) for r in mine] == [(1, "timeout")]
              and pushed["delivered_to"] == deaf_id and acks["items"][-1]["connection"] != deaf_id,
              ([(r.retry_attempt, r.retry_reason) for r in mine], pushed, acks.get("items", [])[-1:]))
        check("deaf: pings were received and not answered", len(deaf["pings"]) >= 1 and deaf["closed_at"],
              deaf)

        before = conns["open"]
        _, sent = await actl(control, "/socket/disconnect", {"reason": "refresh_requested", "close_after": 1})
        await asyncio.sleep(2.5)
        _, conns = await actl(control, "/connections")
        old = next(c for c in conns["connections"] if c["id"] == sent["sent_to"][0])
        check("refresh_requested: the SDK reconnects and the old socket is closed",
              old["closed_at"] is not None and conns["open"] >= 1
              and conns["connections"][-1]["id"] > old["id"], (before, conns["open"], old))
    finally:
        await client.close()


async def raw_socket(api_base, control):
    async with aiohttp.ClientSession() as http:
        async def open_url():
            async with http.post(api_base + "/apps.connections.open",
                                 headers={"Authorization": f"Bearer {APP}"}) as resp:
                return (await resp.json())["url"]

        await actl(control, "/reset", {"close_sockets": True})
        url = await open_url()
        ws = await http.ws_connect(url, autoping=False)
        hello = json.loads((await ws.receive(timeout=5)).data)
        check("hello frame as documented", hello["type"] == "hello" and hello["num_connections"] == 1
              and hello["connection_info"]["app_id"] == "A0APP" and "approximate_connection_time" in hello["debug_info"],
              hello)
        try:
            await http.ws_connect(url)
            check("a used ticket is refused", False, "connected")
        except aiohttp.WSServerHandshakeError as error:
            check("a used ticket is refused with 401", error.status == 401, error.status)

        await ws.send_str("not json")
        await ws.send_str(json.dumps({"envelope_id": "no-such-envelope"}))
        _, errors = await actl(control, "/wait?what=protocol_errors&count=2&timeout=5")
        check("bad frames are protocol errors", [e["reason"] for e in errors.get("items", [])]
              == ["not JSON", "unknown envelope_id"], errors)

        await ws.ping(b"x")
        pong = await ws.receive(timeout=5)
        check("pings are answered", pong.type == aiohttp.WSMsgType.PONG, pong)
        await actl(control, "/socket/deaf", {"on": True})
        await ws.ping(b"y")
        await actl(control, "/socket/push", {"kind": "dm"})
        try:
            msg = await ws.receive(timeout=1.5)
            check("deaf: nothing comes, not even a pong", False, msg)
        except asyncio.TimeoutError:
            check("deaf: nothing comes, not even a pong", True)
        await actl(control, "/socket/deaf", {"on": False})
        await actl(control, "/reset", {})  # forget the envelope swallowed while deaf

        extra = []
        for _ in range(9):
            extra.append(await http.ws_connect(await open_url(), autoping=False))
        eleventh = await http.ws_connect(await open_url(), autoping=False)
        frame = json.loads((await eleventh.receive(timeout=5)).data)
        closing = await eleventh.receive(timeout=5)
        _, conns = await actl(control, "/connections")
        check("the 11th connection gets too_many_websockets and is closed",
              frame == {"type": "disconnect", "reason": "too_many_websockets", "debug_info": {"host": "applink-fake"}}
              and closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED) and conns["open"] == 10,
              (frame, closing, conns["open"]))
        for other in extra + [eleventh]:
            await other.close()

        # close now: an envelope pushed and the socket closed mid-frame, before any ack; it comes
        # again, retry_attempt 1, on the next connection.
        _, closed = await actl(control, "/socket/close", {"push": {"kind": "mention", "text": "cut"}, "half": True})
        got = []
        try:
            while True:
                msg = await ws.receive(timeout=3)
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                got.append(msg.data)
        except (asyncio.TimeoutError, aiohttp.ClientError):
            pass
        ws3 = await http.ws_connect(await open_url(), autoping=False)
        frames = [json.loads((await ws3.receive(timeout=5)).data)]
        frames.append(json.loads((await ws3.receive(timeout=5)).data))
        envelope = frames[1]
        check("close mid-envelope: redelivered on the next connection, retry_attempt 1",
              not got and envelope.get("envelope_id") == closed["pushed"]["envelope_id"]
              and envelope["retry_attempt"] == 1 and envelope["retry_reason"] == "timeout", (got, frames))
        await ws3.send_str(json.dumps({"envelope_id": envelope["envelope_id"]}))
        _, acks = await actl(control, "/wait?what=acks&count=1&timeout=5")
        check("its ack is recorded", acks.get("items", [{}])[0].get("envelope_id") == envelope["envelope_id"], acks)

        _, sent = await actl(control, "/socket/disconnect", {"reason": "link_disabled", "close_after": 0.2})
        frame = json.loads((await ws3.receive(timeout=5)).data)
        closing = await ws3.receive(timeout=5)
        check("link_disabled: the documented body, then the socket closes",
              frame == {"type": "disconnect", "reason": "link_disabled", "debug_info": {"host": "wss-111.slack.com"}}
              and closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), (frame, closing))
        await ws3.close()
        await ws.close()


async def events(control):
    verifier = SignatureVerifier(SECRET)
    seen = []

    async def receiver(request):
        body = await request.text()
        valid = verifier.is_valid_request(body, dict(request.headers))
        seen.append({"valid": valid, "headers": dict(request.headers), "body": body})
        if not valid:
            return web.Response(status=401, text="bad signature")
        payload = json.loads(body)
        if payload.get("type") == "url_verification":
            return web.Response(text=payload["challenge"], content_type="text/plain")
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/slack/events", receiver)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
    try:
        _, sent = await actl(control, "/events/send", {"url": url, "kind": "mention", "text": "over HTTP"})
        body = json.loads(seen[-1]["body"]) if seen else {}
        check("events sender: signed event_callback accepted by SignatureVerifier",
              sent.get("status") == 200 and seen[-1]["valid"] and body.get("type") == "event_callback"
              and body["event"]["type"] == "app_mention" and body["authorizations"][0]["user_id"] == "U0BOT"
              and sent.get("elapsed_ms") is not None, (sent, seen[-1:]))
        _, sent = await actl(control, "/events/send", {"url": url, "kind": "url_verification", "challenge": "abc123"})
        check("events sender: url_verification challenge echoed", sent.get("status") == 200
              and sent.get("body") == "abc123" and seen[-1]["valid"], sent)
        _, sent = await actl(control, "/events/send", {"url": url, "kind": "dm", "retry_num": 2})
        headers = {k.lower(): v for k, v in seen[-1]["headers"].items()}
        check("events sender: retry headers", headers.get("x-slack-retry-num") == "2"
              and headers.get("x-slack-retry-reason") == "http_timeout" and seen[-1]["valid"], headers)
        for option in ("stale", "bad_signature", "no_signature"):
            _, sent = await actl(control, "/events/send", {"url": url, "kind": "dm", option: True})
            check(f"events sender: {option} rejected by SignatureVerifier",
                  sent.get("status") == 401 and not seen[-1]["valid"], (sent.get("status"), seen[-1]))
        stale_ts = int(seen[-3]["headers"]["X-Slack-Request-Timestamp"])
        check("stale is 6 minutes old", abs(time.time() - 360 - stale_ts) < 5, stale_ts)
    finally:
        await runner.cleanup()


async def main() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, os.path.join(HERE, "fake_slack.py"), "--port", "0",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=20)
        ready = json.loads(line)
        check("ready line", set(ready) == {"port", "api_base", "control"}, ready)
        api_base, control = ready["api_base"], ready["control"]
        for name, step in (("web api", lambda: asyncio.to_thread(web_api, api_base, control)),
                           ("socket mode", lambda: socket_mode(api_base, control)),
                           ("raw socket", lambda: raw_socket(api_base, control)),
                           ("events api", lambda: events(control))):
            try:
                await step()
            except Exception as error:  # a crash in one part is a failure, not the end of the check
                where = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == __file__][-1]
                check(f"{name} ran to the end", False,
                      f"{type(error).__name__}: {error} (line {where.lineno}: {where.line})")
    finally:
        if proc.returncode is None:
            proc.terminate()
        rc = await asyncio.wait_for(proc.wait(), timeout=10)
        check("SIGTERM: exit 0", rc == 0, rc)
    if failures:
        print(f"{len(failures)} check(s) failed: " + ", ".join(failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    asyncio.run(main())
