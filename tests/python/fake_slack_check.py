"""Checks fake_slack.py against Slack's own client code (the official `slack_sdk`).

Usage: fake_slack_check.py
Starts the fake as subprocesses (default flags; every scope the new methods need and
--assistant; a token with im:history only), drives them with slack_sdk's WebClient (history,
files_upload_v2, assistant_threads_setStatus, ...), its aiohttp SocketModeClient and
SignatureVerifier (plus a raw aiohttp WebSocket and plain HTTP for what an SDK hides), prints one
line per check and exits 0 only if every check held.
"""

import asyncio
import base64
import hashlib
import json
import os
import sys
import time
import traceback
import urllib.request
from urllib.parse import parse_qsl

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
# Every scope the fake's methods ask for (the default list lacks the last four).
ALL_SCOPES = ("app_mentions:read,chat:write,im:history,im:read,reactions:write,"
              "channels:history,groups:history,files:read,files:write")
# A slash command's fields, in order, as https://docs.slack.dev/interactivity/implementing-slash-commands
# documents them (without a Grid's enterprise_id / enterprise_name).
SLASH_FIELDS = ["token", "team_id", "team_domain", "channel_id", "channel_name", "user_id", "user_name",
                "command", "text", "response_url", "trigger_id", "api_app_id"]

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


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def http(url, data=None, headers=None, follow=True, read=None):
    """A plain HTTP request: (status, headers, body); `read` bytes at most, then hang up."""
    method = "POST" if data is not None else "GET"
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(NoRedirect)
    try:
        resp = opener.open(req, timeout=60)
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()
    with resp:
        return resp.status, resp.headers, resp.read() if read is None else resp.read(read)


def multipart(field, filename, data):
    """A multipart/form-data body with one file part: (body, content type)."""
    boundary = "pincer-check-boundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{filename}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def slack_error(call, **kwargs):
    """The error code of a call that must fail (the whole answer when it did not)."""
    try:
        return call(**kwargs).data
    except SlackApiError as e:
        return e.response["error"]


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
            if kind == "slash" and req is not None:
                check("slash_commands payload has the documented fields", list(req.payload) == SLASH_FIELDS
                      and req.payload["command"] == "/pincer" and req.payload["text"] == "do it"
                      and req.payload["trigger_id"], req.payload)
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
        if request.content_type == "application/x-www-form-urlencoded":
            seen[-1]["form"] = parse_qsl(body, keep_blank_values=True)
            return web.Response(text="")
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

        # A slash command over HTTP: the documented form fields, signed like every request.
        forms = []
        for text in ("status please", "again"):
            _, sent = await actl(control, "/events/send", {"url": url, "kind": "slash", "text": text,
                                                           "user": "U0ALICE", "channel": "C0OPS"})
            forms.append((sent, seen[-1]))
        (sent, got), (_, again) = forms
        fields = got.get("form", [])
        form = dict(fields)
        check("events sender: slash command form-encoded, signed, with the documented fields",
              sent.get("status") == 200 and got["valid"] and [k for k, _ in fields] == SLASH_FIELDS
              and got["headers"].get("Content-Type") == "application/x-www-form-urlencoded"
              and form["command"] == "/pincer" and form["text"] == "status please"
              and form["user_id"] == "U0ALICE" and form["channel_id"] == "C0OPS"
              and form["team_id"] == "T0TEAM" and form["api_app_id"] == "A0APP", (sent, got))
        check("events sender: each slash command has its own trigger_id",
              form.get("trigger_id") and form.get("trigger_id") != dict(again.get("form", [])).get("trigger_id"),
              (form, again))
        status, _, _ = await asyncio.to_thread(http, form["response_url"], b'{"text": "done"}',
                                               {"Content-Type": "application/json"})
        _, calls = await actl(control, "/calls?method=response_url")
        check("a slash command's response_url is the fake's, and records what it gets",
              form["response_url"].startswith("http://127.0.0.1:") and status == 200
              and calls["calls"][-1]["raw_body"] == '{"text": "done"}', (form["response_url"], calls))

        # Files on events: a DM's event is a file_share message, a mention's carries them.
        content = base64.b64encode(b"hello").decode()
        _, sent = await actl(control, "/events/send", {"url": url, "kind": "dm", "text": "see",
                                                       "files": [{"name": "a.txt", "content_b64": content}]})
        event = json.loads(seen[-1]["body"])["event"]
        check("events sender: a DM with files is a file_share message carrying the file objects",
              event.get("subtype") == "file_share" and event.get("upload") is True
              and event["files"][0]["name"] == "a.txt" and event["files"][0]["size"] == 5
              and event["files"][0]["mode"] == "hosted" and event["files"][0]["id"].startswith("F")
              and sent["files"] == event["files"], event)
        _, sent = await actl(control, "/events/send", {"url": url, "kind": "mention",
                                                       "files": [{"name": "b.png", "content": "x"}]})
        event = json.loads(seen[-1]["body"])["event"]
        check("events sender: a mention with files carries them, without a subtype",
              event["type"] == "app_mention" and "subtype" not in event
              and event["files"][0]["mimetype"] == "image/png" and event["files"][0]["filetype"] == "png", event)
    finally:
        await runner.cleanup()


def all_pages(call, **kwargs):
    """Every page of a cursor-paginated method: ([messages of each page], [has_more of each])."""
    pages, more, cursor = [], [], None
    while True:
        answer = call(**kwargs, **({"cursor": cursor} if cursor else {}))
        pages.append(answer["messages"])
        more.append(answer["has_more"])
        cursor = (answer.get("response_metadata") or {}).get("next_cursor")
        if not cursor or len(pages) > 20:
            return pages, more


def history_and_dms(api_base, control):
    """conversations.replies / .history over what was seeded, pushed and posted; DMs to a user id."""
    client = WebClient(token=BOT, base_url=api_base + "/")
    _, seeded = ctl(control, "/history", {"channel": "C0CHAN", "messages": [
        {"user": "U0ALICE", "text": "the parent"},
        {"user": "U0ALICE", "text": "a top-level message"},
    ]})
    parent, top = seeded["ts"]
    _, replies = ctl(control, "/history", {"channel": "C0CHAN", "messages": [
        {"user": "U0BOB", "text": "first reply", "thread_ts": parent},
        {"bot": True, "text": "a bot reply", "thread_ts": parent},
    ]})
    _, pushed = ctl(control, "/socket/push", {"kind": "mention", "channel": "C0CHAN", "user": "U0CAROL",
                                              "text": "pushed reply", "thread_ts": parent})
    posted = client.chat_postMessage(channel="C0CHAN", thread_ts=parent, text="posted reply")
    client.chat_update(channel="C0CHAN", ts=posted["ts"], text="posted reply, edited")
    latest = client.chat_postMessage(channel="C0CHAN", text="newest top-level")["ts"]
    thread = replies["ts"] + [pushed["ts"], posted["ts"]]

    pages, more = all_pages(client.conversations_replies, channel="C0CHAN", ts=parent, limit=2)
    flat = [m for page in pages for m in page]
    check("conversations.replies: the parent first, then every reply in order, 2 a page",
          [m["ts"] for m in flat] == [parent] + thread and [len(p) for p in pages] == [2, 2, 1]
          and more == [True, True, False], ([[m["ts"] for m in p] for p in pages], more))
    check("conversations.replies: thread fields on the parent and the replies",
          flat[0]["reply_count"] == 4 and flat[0]["reply_users"] == ["U0BOB", "U0BOT", "U0CAROL"]
          and flat[0]["latest_reply"] == posted["ts"] and flat[1]["parent_user_id"] == "U0ALICE"
          and all(m["thread_ts"] == parent for m in flat), flat)
    check("conversations.replies: pushed events, bot posts and chat.update are in the log",
          flat[3]["text"] == "<@U0BOT> pushed reply" and flat[3]["user"] == "U0CAROL"
          and flat[4]["text"] == "posted reply, edited" and flat[4]["bot_id"] == "B0BOT"
          and flat[2]["user"] == "U0BOT", flat)
    by_reply = client.conversations_replies(channel="C0CHAN", ts=thread[1])
    check("conversations.replies: a reply's ts gives its whole thread",
          [m["ts"] for m in by_reply["messages"]] == [parent] + thread and by_reply["has_more"] is False,
          by_reply.data)
    check("conversations.replies: thread_not_found, channel_not_found, invalid_cursor",
          [slack_error(client.conversations_replies, channel="C0CHAN", ts="1.000001"),
           slack_error(client.conversations_replies, channel="general", ts=parent),
           slack_error(client.conversations_replies, channel="C0CHAN", ts=parent, cursor="bm9wZQ==")]
          == ["thread_not_found", "channel_not_found", "invalid_cursor"])

    pages, more = all_pages(client.conversations_history, channel="C0CHAN", limit=2)
    check("conversations.history: top-level messages only, newest first, 2 a page",
          [[m["ts"] for m in p] for p in pages] == [[latest, top], [parent]] and more == [True, False]
          and pages[1][0]["reply_count"] == 4, ([[m["ts"] for m in p] for p in pages], more))
    window = client.conversations_history(channel="C0CHAN", latest=top, inclusive=True)
    check("conversations.history: latest + inclusive bound the window",
          [m["ts"] for m in window["messages"]] == [top, parent] and window["latest"] == top
          and window["pin_count"] == 0, window.data)

    alice = client.chat_postMessage(channel="U0ALICE", text="a word in private")
    again = client.chat_postMessage(channel="U0ALICE", text="and another")
    ctl(control, "/socket/push", {"kind": "dm", "user": "U0BOB", "channel": "D0BOBDM", "text": "hi bot"})
    bob = client.chat_postMessage(channel="U0BOB", text="hi Bob")
    dm = client.conversations_history(channel=alice["channel"])
    check("chat.postMessage to a user id posts into the app's DM with them, the same D… each time",
          alice["channel"] == again["channel"] == "D0ALICE" and bob["channel"] == "D0BOBDM"
          and [m["text"] for m in dm["messages"]] == ["and another", "a word in private"],
          (alice.data, bob.data, dm.data))
    dm = client.conversations_history(channel="D0BOBDM")
    check("conversations.history of a DM (im:history) has the pushed DM and the reply",
          [m["text"] for m in dm["messages"]] == ["hi Bob", "hi bot"], dm.data)

    ctl(control, "/ratelimit", {"method": "conversations.history", "count": 1, "retry_after": 2})
    try:
        client.conversations_history(channel="C0CHAN")
        check("/_test/ratelimit works for conversations.history", False, "no SlackApiError")
    except SlackApiError as e:
        check("/_test/ratelimit works for conversations.history", e.response.status_code == 429
              and e.response["error"] == "ratelimited", e.response.data)


def files_out(api_base, control):
    """files_upload_v2 end to end, the upload URL's forms, and the errors."""
    client = WebClient(token=BOT, base_url=api_base + "/")
    _, seeded = ctl(control, "/history", {"channel": "C0FILES", "messages": [{"text": "send me the report"}]})
    parent = seeded["ts"][0]
    data = bytes(range(256)) * 12_000 + b"\x00tail"  # 3 MB: more than aiohttp takes by default
    sent = client.files_upload_v2(channel="C0FILES", thread_ts=parent, content=data, filename="report.bin",
                                  title="The report", initial_comment="here it is")
    file_id = sent["file"]["id"]
    _, files = ctl(control, "/files")
    got = next((f for f in files["files"] if f["file_id"] == file_id), {})
    check("files_upload_v2: getUploadURLExternal -> upload -> completeUploadExternal, the exact bytes kept",
          base64.b64decode(got.get("content_b64", "")) == data and got["sha256"] == hashlib.sha256(data).hexdigest()
          and got["length"] == got["declared_length"] == len(data) and got["name"] == "report.bin"
          and got["title"] == "The report" and got["upload_form"] == "raw", got)
    check("files_upload_v2: shared into the thread with its comment",
          got.get("channel_id") == "C0FILES" and got.get("thread_ts") == parent
          and got.get("initial_comment") == "here it is" and sent["file"]["title"] == "The report", (got, sent.data))
    thread = client.conversations_replies(channel="C0FILES", ts=parent)["messages"]
    check("the file share message is in the thread's history",
          len(thread) == 2 and thread[1]["files"][0]["id"] == file_id and thread[1]["text"] == "here it is"
          and thread[1]["ts"] == got["message_ts"] and thread[1]["user"] == "U0BOT", thread)
    status, headers, body = http(sent["file"]["url_private"], headers={"Authorization": f"Bearer {BOT}"})
    check("an uploaded file is served at its url_private", status == 200 and body == data, (status, len(body)))

    ticket = client.files_getUploadURLExternal(filename="notes.txt", length=5)
    body, content_type = multipart("filename", "notes.txt", b"notes")
    status, _, answer = http(ticket["upload_url"], body, {"Content-Type": content_type})
    done = client.files_completeUploadExternal(files=[{"id": ticket["file_id"]}], channel_id="D0DM")
    _, files = ctl(control, "/files")
    got = next((f for f in files["files"] if f["file_id"] == ticket["file_id"]), {})
    check("upload URL: multipart with a `filename` part -> 200 \"OK - 5\", the bytes kept",
          status == 200 and answer == b"OK - 5" and got.get("upload_form") == "multipart"
          and base64.b64decode(got.get("content_b64", "")) == b"notes" and done["files"][0]["title"] == "notes.txt"
          and got["channel_id"] == "D0DM" and got["thread_ts"] is None, (status, answer, got))

    short = client.files_getUploadURLExternal(filename="short.txt", length=3)
    status, _, answer = http(short["upload_url"], b"12345")
    _, files = ctl(control, "/files")
    pending = next((f for f in files["pending"] if f["file_id"] == short["file_id"]), {})
    check("upload URL: a length other than the declared one is recorded",
          status == 200 and answer == b"OK - 5" and pending.get("length_mismatch") is True
          and pending["length"] == 5 and pending["declared_length"] == 3, pending)
    unsent = client.files_getUploadURLExternal(filename="never.txt", length=3)
    check("files.completeUploadExternal: file_update_failed (length), file_not_found (unknown, not uploaded)",
          [slack_error(client.files_completeUploadExternal, files=[{"id": short["file_id"]}]),
           slack_error(client.files_completeUploadExternal, files=[{"id": "F0NOSUCH"}]),
           slack_error(client.files_completeUploadExternal, files=[{"id": unsent["file_id"]}]),
           slack_error(client.files_completeUploadExternal, files=[{"id": file_id}])]
          == ["file_update_failed", "file_not_found", "file_not_found", "file_not_found"])
    try:
        client.api_call("files.getUploadURLExternal", params={"length": 3})
        check("files.getUploadURLExternal without filename fails", False, "no SlackApiError")
    except SlackApiError as e:
        check("files.getUploadURLExternal without filename -> invalid_arguments",
              e.response["error"] == "invalid_arguments"
              and "filename" in e.response["response_metadata"]["messages"][0], e.response.data)
    check("files.getUploadURLExternal with length 0 -> missing_argument",
          slack_error(client.files_getUploadURLExternal, filename="x", length=0) == "missing_argument")
    status, _, _ = http(api_base.replace("/api", "/upload/v1/nosuchticket"), b"x")
    check("an unknown upload URL -> 404", status == 404, status)


def downloads(api_base, control):
    """A pushed file's url_private with and without the token; a stream the client leaves."""
    _, before = ctl(control, "/downloads")
    base = len(before["downloads"])
    _, pushed = ctl(control, "/socket/push", {"kind": "dm", "text": "two files", "files": [
        {"name": "hello.txt", "content_b64": base64.b64encode(b"hello, world").decode()},
        {"name": "big.bin", "mimetype": "application/octet-stream", "size": 1024, "stream_bytes": 20_000_000},
    ]})
    small, big = pushed["files"]
    auth = {"Authorization": f"Bearer {BOT}"}
    status, headers, body = http(small["url_private"], headers=auth)
    check("url_private with the bot token: the bytes, with the mimetype",
          status == 200 and body == b"hello, world" and headers["Content-Type"] == "text/plain", (status, body))
    status, headers, body = http(small["url_private_download"], follow=False)
    check("url_private without a token: 302 to the sign-in page",
          status == 302 and "/?redir=%2Ffiles-pri%2FT0TEAM-" in headers["Location"], (status, dict(headers)))
    status, headers, body = http(small["url_private"], headers={"Authorization": "Bearer xoxb-wrong"})
    check("url_private with a wrong token, redirects followed: 200 HTML, not the file",
          status == 200 and headers["Content-Type"].startswith("text/html") and b"<html" in body, (status, body[:80]))
    check("a file's size is what the push claims", big["size"] == 1024 and small["size"] == 12, pushed["files"])
    status, _, body = http(big["url_private"], headers=auth, read=256 * 1024)
    _, waited = ctl(control, f"/wait?what=downloads&count={base + 4}&timeout=10")
    left = waited["items"][-1] if waited.get("items") else {}
    check("stream_bytes: a client that leaves early is recorded as hung up",
          status == 200 and len(body) == 256 * 1024 and left.get("hung_up") is True
          and left["bytes_total"] == 20_000_000 and left["bytes_sent"] < 20_000_000, left)
    status, headers, body = http(big["url_private"], headers=auth)
    _, waited = ctl(control, f"/wait?what=downloads&count={base + 5}&timeout=10")
    whole = waited["items"][-1] if waited.get("items") else {}
    check("stream_bytes: N zero bytes, whatever the claimed size",
          status == 200 and len(body) == 20_000_000 and body.count(0) == 20_000_000
          and headers["Content-Length"] == "20000000" and whole.get("hung_up") is False
          and whole["bytes_sent"] == 20_000_000, (status, len(body), whole))
    _, recorded = ctl(control, "/downloads")
    check("downloads are recorded with path, auth and outcome",
          [(d["auth_ok"], d["refused"], d["status"]) for d in recorded["downloads"][base:]]
          == [(True, None, 200), (False, "no token", 302), (False, "invalid token", 302), (True, None, 200),
              (True, None, 200)], recorded)


def assistant(default, full, bare):
    """assistant.threads.setStatus: off (the default), on (--assistant), and without the scope."""
    off = WebClient(token=BOT, base_url=default["api_base"] + "/")
    on = WebClient(token=BOT, base_url=full["api_base"] + "/")
    check("setStatus without --assistant: a channel thread works, a DM answers access_denied",
          off.assistant_threads_setStatus(channel_id="C0CHAN", thread_ts="1700000000.000100",
                                          status="is thinking...")["ok"]
          and slack_error(off.assistant_threads_setStatus, channel_id="D0DM", thread_ts="1700000000.000100",
                          status="is thinking...") == "access_denied")
    thread = "1700000001.000100"
    first = on.assistant_threads_setStatus(channel_id="D0DM", thread_ts=thread, status="is thinking...",
                                           loading_messages=["Reading the thread…", "Asking the model…"])
    cleared = on.assistant_threads_setStatus(channel_id="D0DM", thread_ts=thread, status="")
    on.assistant_threads_setStatus(channel_id="D0DM", thread_ts=thread, status="is writing...")
    on.chat_postMessage(channel="D0DM", thread_ts=thread, text="the answer")
    _, statuses = ctl(full["control"], "/status")
    mine = [(x["status"], x["cleared"], x["by"]) for x in statuses["statuses"] if x["thread_ts"] == thread]
    check("setStatus with --assistant: set, cleared with \"\", and cleared by the bot's reply",
          first["ok"] and cleared["ok"] and mine == [("is thinking...", False, "setStatus"),
                                                     ("", True, "setStatus"), ("is writing...", False, "setStatus"),
                                                     ("", True, "reply")]
          and statuses["statuses"][0]["loading_messages"] == ["Reading the thread…", "Asking the model…"], statuses)
    check("setStatus: channel_not_found, invalid_thread_ts, invalid_arguments (11 loading messages)",
          [slack_error(on.assistant_threads_setStatus, channel_id="general", thread_ts=thread, status="x"),
           slack_error(on.assistant_threads_setStatus, channel_id="D0DM", thread_ts="yesterday", status="x"),
           slack_error(on.assistant_threads_setStatus, channel_id="D0DM", thread_ts=thread, status="x",
                       loading_messages=["m"] * 11)]
          == ["channel_not_found", "invalid_thread_ts", "invalid_arguments"])
    try:
        WebClient(token=BOT, base_url=bare["api_base"] + "/").assistant_threads_setStatus(
            channel_id="C0CHAN", thread_ts=thread, status="x")
        check("setStatus without chat:write or assistant:write fails", False, "no SlackApiError")
    except SlackApiError as e:
        check("setStatus without chat:write or assistant:write -> missing_scope",
              e.response.data == {"ok": False, "error": "missing_scope", "needed": "chat:write",
                                  "provided": "im:history"}, e.response.data)


def scopes(api_base, control):
    """The default scopes lack channels:history, groups:history, files:read and files:write."""
    client = WebClient(token=BOT, base_url=api_base + "/")
    provided = "app_mentions:read,chat:write,im:history,im:read,reactions:write"
    for call, kwargs, needed in (
            (client.conversations_history, {"channel": "C0CHAN"}, "channels:history"),
            (client.conversations_replies, {"channel": "G0PRIV", "ts": "1.000001"}, "groups:history"),
            (client.files_upload_v2, {"channel": "C0CHAN", "content": b"x", "filename": "x.txt"}, "files:write")):
        try:
            call(**kwargs)
            check(f"{call.__name__} without {needed} fails", False, "no SlackApiError")
        except SlackApiError as e:
            check(f"{call.__name__} without {needed} -> missing_scope",
                  e.response.data == {"ok": False, "error": "missing_scope", "needed": needed, "provided": provided},
                  e.response.data)
    _, pushed = ctl(control, "/socket/push", {"kind": "dm", "files": [{"name": "a.txt", "content": "a"}]})
    status, headers, _ = http(pushed["files"][0]["url_private"], headers={"Authorization": f"Bearer {BOT}"},
                              follow=False)
    _, recorded = ctl(control, "/downloads")
    check("url_private with a token lacking files:read: the sign-in redirect",
          status == 302 and recorded["downloads"][-1]["refused"] == "missing files:read", recorded)


async def start_fake(*args):
    """fake_slack.py started with `args`: (process, its ready line)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, os.path.join(HERE, "fake_slack.py"), "--port", "0", *args,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=20)
        return proc, json.loads(line)
    except BaseException:
        proc.kill()
        await proc.wait()
        raise


async def main() -> None:
    procs = []
    try:
        proc, ready = await start_fake()
        procs.append(proc)
        check("ready line", set(ready) == {"port", "api_base", "control"}, ready)
        proc, full = await start_fake("--scopes", ALL_SCOPES, "--assistant")
        procs.append(proc)
        proc, bare = await start_fake("--scopes", "im:history")
        procs.append(proc)
        api_base, control = ready["api_base"], ready["control"]
        for name, step in (("web api", lambda: asyncio.to_thread(web_api, api_base, control)),
                           ("socket mode", lambda: socket_mode(api_base, control)),
                           ("raw socket", lambda: raw_socket(api_base, control)),
                           ("events api", lambda: events(control)),
                           ("scopes", lambda: asyncio.to_thread(scopes, api_base, control)),
                           ("history", lambda: asyncio.to_thread(history_and_dms, full["api_base"], full["control"])),
                           ("files out", lambda: asyncio.to_thread(files_out, full["api_base"], full["control"])),
                           ("downloads", lambda: asyncio.to_thread(downloads, full["api_base"], full["control"])),
                           ("assistant", lambda: asyncio.to_thread(assistant, ready, full, bare))):
            try:
                await step()
            except Exception as error:  # a crash in one part is a failure, not the end of the check
                where = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == __file__][-1]
                check(f"{name} ran to the end", False,
                      f"{type(error).__name__}: {error} (line {where.lineno}: {where.line})")
    finally:
        codes = []
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
            codes.append(await asyncio.wait_for(proc.wait(), timeout=10))
        check("SIGTERM: exit 0", codes and all(rc == 0 for rc in codes), codes)
    if failures:
        print(f"{len(failures)} check(s) failed: " + ", ".join(failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    asyncio.run(main())
