"""Checks fake_feishu.py against Feishu's own client code (the official `lark-oapi` SDK).

Usage: fake_feishu_check.py
Starts the fake as a subprocess, drives it with lark_oapi.Client (tenant token, im.v1.message
create / reply / list / patch, im.v1.message_resource.get, im.v1.file.create, im.v1.image.create),
lark_oapi.ws.Client (the long connection, through its event dispatcher) and lark_oapi's
EventDispatcherHandler (webhook decryption, token and signature checks), plus plain HTTP for what
the SDK hides; prints one line per check and exits 0 only if every check held.
"""

import base64
import hashlib
import io
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import lark_oapi as lark
import lark_oapi.ws.client as lark_ws_client
from lark_oapi.event.callback.model.p2_card_action_trigger import P2CardActionTriggerResponse
from lark_oapi.api.im.v1 import (CreateFileRequest, CreateFileRequestBody, CreateImageRequest,
                                 CreateImageRequestBody, CreateMessageRequest, CreateMessageRequestBody,
                                 GetMessageResourceRequest, ListMessageRequest, PatchMessageRequest,
                                 PatchMessageRequestBody, ReplyMessageRequest, ReplyMessageRequestBody)
from lark_oapi.core.cache import ICache
from lark_oapi.core.model import RawRequest
from lark_oapi.core.utils import AESCipher
from requests.structures import CaseInsensitiveDict

HERE = os.path.dirname(os.path.abspath(__file__))
APP_ID = "cli_fake"
SECRET = "fake-app-secret"
ENCRYPT_KEY = "fake-encrypt-key"
TOKEN = "fake-verification-token"

failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures.append(name)


def http(url, body=None, method=None, headers=None):
    """(status, headers, JSON answer) of one plain HTTP call."""
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode()
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"))
    req.add_header("Content-Type", "application/json; charset=utf-8")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as error:
        raw = error.read() or b"{}"
        try:
            return error.code, dict(error.headers), json.loads(raw)
        except ValueError:
            return error.code, dict(error.headers), {"error": raw.decode("utf-8", "replace")}


def wait_until(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


class TokenCache(ICache):
    """A token cache of one client's own. lark-oapi's TokenManager keeps tenant tokens in one
    process-wide cache keyed by app_id, so a client would reuse a token an earlier section expired
    (or one another fake issued); building a client installs its cache there."""

    def __init__(self):
        self.values = {}

    def get(self, key):
        value, expires = self.values.get(key, (None, 0))
        return value if expires > time.time() else None

    def set(self, key, value, expire):
        self.values[key] = (value, time.time() + expire)


def sdk_client(base):
    return lark.Client.builder().app_id(APP_ID).app_secret(SECRET).domain(base) \
        .log_level(lark.LogLevel.ERROR).cache(TokenCache()).build()


def tenant_token(base):
    return http(base + "/open-apis/auth/v3/tenant_access_token/internal",
                {"app_id": APP_ID, "app_secret": SECRET})[2]["tenant_access_token"]


def start_fake(*flags):
    """The fake as a child process, and its ready line."""
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "fake_feishu.py"), "--app-id", APP_ID, "--app-secret", SECRET,
         "--encrypt-key", ENCRYPT_KEY, "--verification-token", TOKEN, *flags],
        stdout=subprocess.PIPE, text=True)
    return proc, json.loads(proc.stdout.readline())


def stop_fake(proc):
    proc.terminate()
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return None


def open_api(base, control):
    client = sdk_client(base)
    req = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(
        CreateMessageRequestBody.builder().receive_id("oc_group1").msg_type("text")
        .content(json.dumps({"text": "你好，飞书"}, ensure_ascii=False)).build()).build()
    resp = client.im.v1.message.create(req)
    check("SDK im.v1.message.create succeeds with a fresh message_id",
          resp.success() and resp.data.message_id.startswith("om_"), f"{resp.code} {resp.msg}")
    mid = resp.data.message_id if resp.success() else "om_x"
    _, _, calls = http(control + "/calls?path=/open-apis/auth/v3/tenant_access_token/internal")
    tok = calls["calls"][0]["answer"] if calls["calls"] else {}
    check("SDK fetched a tenant token first (app_id/app_secret)",
          len(calls["calls"]) == 1 and calls["calls"][0]["body"] == {"app_id": APP_ID, "app_secret": SECRET}
          and tok.get("code") == 0 and tok.get("tenant_access_token", "").startswith("t-") and tok.get("expire") == 7200,
          calls)
    _, _, calls = http(control + "/calls?path=/open-apis/im/v1/messages")
    c = calls["calls"][-1] if calls["calls"] else {}
    check("the create is recorded with Bearer token, receive_id_type, msg_type and Chinese content",
          c.get("headers", {}).get("Authorization") == "Bearer " + tok.get("tenant_access_token", "?")
          and c.get("query") == {"receive_id_type": "chat_id"} and c["body"]["msg_type"] == "text"
          and json.loads(c["body"]["content"])["text"] == "你好，飞书", c)

    rreq = ReplyMessageRequest.builder().message_id(mid).request_body(
        ReplyMessageRequestBody.builder().msg_type("text").content(json.dumps({"text": "回复"}))
        .reply_in_thread(True).build()).build()
    rresp = client.im.v1.message.reply(rreq)
    check("SDK im.v1.message.reply succeeds (parent/root = the message, thread id when in thread)",
          rresp.success() and rresp.data.parent_id == mid and rresp.data.root_id == mid
          and rresp.data.thread_id.startswith("omt_"), f"{rresp.code} {rresp.msg}")
    _, _, msgs = http(control + "/messages")
    last = msgs["messages"][-1]
    check("the reply is recorded with reply_in_thread", last["kind"] == "reply" and last["reply_in_thread"] is True
          and last["parent_id"] == mid, last)

    def card(buttons):
        return json.dumps({"schema": "2.0", "config": {"update_multi": True}, "body": {"elements": [
            {"tag": "markdown", "content": "**批准**?"}] + [
            {"tag": "button", "name": f"b_{b}", "text": {"tag": "plain_text", "content": b}, "type": "primary",
             "behaviors": [{"type": "callback", "value": {"pincer_action": b}}]} for b in buttons]}},
            ensure_ascii=False)

    creq = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(
        CreateMessageRequestBody.builder().receive_id("oc_group1").msg_type("interactive")
        .content(card(["once", "deny"])).build()).build()
    cresp = client.im.v1.message.create(creq)
    check("SDK creates an interactive card (JSON 2.0)", cresp.success(), f"{cresp.code} {cresp.msg}")
    cmid = cresp.data.message_id if cresp.success() else "om_x"
    presp = client.im.v1.message.patch(PatchMessageRequest.builder().message_id(cmid).request_body(
        PatchMessageRequestBody.builder().content(card([])).build()).build())
    check("SDK im.v1.message.patch replaces the card", presp.success(), f"{presp.code} {presp.msg}")
    presp = client.im.v1.message.patch(PatchMessageRequest.builder().message_id(mid).request_body(
        PatchMessageRequestBody.builder().content(card([])).build()).build())
    check("... and refuses to patch a message that is not a card (230001)", presp.code == 230001,
          f"{presp.code} {presp.msg}")
    nameless = json.dumps({"schema": "2.0", "body": {"elements": [{"tag": "button", "text": {"tag": "plain_text",
                           "content": "x"}}]}})
    nresp = client.im.v1.message.create(CreateMessageRequest.builder().receive_id_type("chat_id").request_body(
        CreateMessageRequestBody.builder().receive_id("oc_group1").msg_type("interactive").content(nameless)
        .build()).build())
    check("a card 2.0 button without a name gets 200340", nresp.code == 200340, f"{nresp.code} {nresp.msg}")
    bad = json.dumps({"schema": "2.0", "body": {"elements": [{"tag": "button", "name": "b", "text": {
                      "tag": "plain_text", "content": "x"}, "type": "rainbow"}]}})
    bresp = client.im.v1.message.create(CreateMessageRequest.builder().receive_id_type("chat_id").request_body(
        CreateMessageRequestBody.builder().receive_id("oc_group1").msg_type("interactive").content(bad)
        .build()).build())
    check("a card Feishu would refuse gets 230099", bresp.code == 230099, f"{bresp.code} {bresp.msg}")

    bearer = {"Authorization": "Bearer " + tok.get("tenant_access_token", "")}
    st, _, r = http(base + f"/open-apis/im/v1/messages/{mid}/reactions", {"reaction_type": {"emoji_type": "SMILE"}},
                    headers=bearer)
    rid = (r.get("data") or {}).get("reaction_id", "")
    st2, _, r2 = http(base + f"/open-apis/im/v1/messages/{mid}/reactions/{rid}", method="DELETE", headers=bearer)
    check("reaction add then delete", st == 200 and r["code"] == 0 and st2 == 200 and r2["code"] == 0
          and r2["data"]["reaction_type"]["emoji_type"] == "SMILE", (r, r2))
    st, _, r = http(base + "/open-apis/bot/v3/info", headers=bearer)
    check("bot/v3/info answers the bot", st == 200 and r["bot"]["open_id"].startswith("ou_bot")
          and r["bot"]["app_name"] == "pincer-bot", r)

    st, _, r = http(base + "/open-apis/auth/v3/tenant_access_token/internal", {"app_id": APP_ID, "app_secret": "nope"})
    check("wrong app_secret -> 10014", st == 400 and r.get("code") == 10014, (st, r))
    st, _, r = http(base + "/open-apis/bot/v3/info")
    check("no token -> 99991661", r.get("code") == 99991661, (st, r))

    http(control + "/ratelimit", {"count": 1, "reset": 7})
    resp = client.im.v1.message.create(req)
    check("an armed rate limit: the SDK's next create gets 99991400", resp.code == 99991400, f"{resp.code} {resp.msg}")
    _, _, calls = http(control + "/calls?path=/open-apis/im/v1/messages")
    c = calls["calls"][-1]
    check("... as HTTP 429 with x-ogw-ratelimit-limit / -reset",
          c["status"] == 429 and c["answer_headers"] == {"x-ogw-ratelimit-limit": "100", "x-ogw-ratelimit-reset": "7"}, c)
    resp = client.im.v1.message.create(req)
    check("... and only the next K=1 sends", resp.success(), f"{resp.code} {resp.msg}")

    _, _, r = http(control + "/tokens/expire", {})
    resp = client.im.v1.message.create(req)
    check("tokens expired by the control API: the SDK's cached token now gets 99991663 (no auto-refresh)",
          r.get("expired", 0) >= 1 and resp.code == 99991663, f"{r} {resp.code} {resp.msg}")


def long_connection(base, control):
    got = []
    failed_once = set()

    def on_message(data: lark.im.v1.P2ImMessageReceiveV1):
        msg = data.event.message
        text = json.loads(msg.content)
        if "fail-once" in msg.content and data.header.event_id not in failed_once:
            failed_once.add(data.header.event_id)
            raise RuntimeError("handler fails once on purpose")
        got.append({"event_id": data.header.event_id, "message_id": msg.message_id, "chat_type": msg.chat_type,
                    "message_type": msg.message_type, "content": text,
                    "mentions": [(m.key, m.id.open_id) for m in (msg.mentions or [])],
                    "sender": data.event.sender.sender_id.open_id})

    clicks = []

    def on_click(data):
        clicks.append({"event_id": data.header.event_id, "open_id": data.event.operator.open_id,
                       "value": data.event.action.value, "message_id": data.event.context.open_message_id})
        return P2CardActionTriggerResponse({"toast": {"type": "info", "content": "收到"}})

    handler = lark.EventDispatcherHandler.builder("", "").register_p2_im_message_receive_v1(on_message) \
        .register_p2_card_action_trigger(on_click).build()
    cli = lark.ws.Client(APP_ID, SECRET, event_handler=handler, domain=base, log_level=lark.LogLevel.ERROR)

    def run():
        asyncio_loop = lark_ws_client.loop  # the SDK runs on its module-level loop
        import asyncio
        asyncio.set_event_loop(asyncio_loop)
        try:
            cli.start()
        except Exception:  # noqa: BLE001 - reported through the checks
            traceback.print_exc()

    threading.Thread(target=run, daemon=True).start()
    st, _, r = http(control + "/wait?what=connections&count=1&timeout=15")
    check("lark_oapi.ws.Client connects (endpoint POST, then /ws)", st == 200 and r["count"] == 1, r)
    _, _, calls = http(control + "/calls?path=/callback/ws/endpoint")
    check("the endpoint call carried AppID / AppSecret",
          calls["calls"] and calls["calls"][0]["body"] == {"AppID": APP_ID, "AppSecret": SECRET}, calls)

    _, _, p = http(control + "/ws/push", {"kind": "p2p", "text": "你好，机器人 🤖", "user": "ou_user1"})
    ok = wait_until(lambda: any(g["message_id"] == p["message_id"] for g in got))
    g = next((g for g in got if g["message_id"] == p["message_id"]), {})
    check("a pushed p2p text reaches the SDK's im.message.receive_v1 handler",
          ok and g["content"] == {"text": "你好，机器人 🤖"} and g["chat_type"] == "p2p"
          and g["sender"] == "ou_user1" and g["event_id"] == p["event_id"], (p, got))
    st, _, acks = http(control + "/wait?what=acks&count=1&timeout=5")
    a = acks["items"][0] if acks.get("items") else {}
    check("the fake records the SDK's ack: code 200, biz_rt header, delay",
          st == 200 and a["code"] == 200 and a["biz_rt"] is not None and a["event_id"] == p["event_id"]
          and a["delay_ms"] >= 0 and a["headers"]["sum"] == "1", a)

    _, _, p = http(control + "/ws/push", {"kind": "group_mention", "text": "帮我总结一下", "split": True})
    ok = wait_until(lambda: any(g["message_id"] == p["message_id"] for g in got))
    g = next((g for g in got if g["message_id"] == p["message_id"]), {})
    check("a group @-mention split into 3 frames (sum/seq) is reassembled by the SDK",
          ok and g["chat_type"] == "group" and g["content"]["text"] == "@_user_1 帮我总结一下"
          and g["mentions"] == [("@_user_1", "ou_bot0fake0000000000000000000000")], g)
    _, _, acks = http(control + "/wait?what=acks&count=2&timeout=5")
    a = acks["items"][-1]
    check("... and acked once, on the last fragment's frame", len(acks["items"]) == 2
          and a["event_id"] == p["event_id"] and a["code"] == 200 and a["headers"]["sum"] == "3", acks["items"])

    _, _, p = http(control + "/ws/push", {"kind": "card_action", "user": "ou_user1", "message_id": "om_card1",
                                          "value": {"pincer_action": "a:once"}})
    ok = wait_until(lambda: any(c["event_id"] == p["event_id"] for c in clicks))
    c = next((c for c in clicks if c["event_id"] == p["event_id"]), {})
    check("a card_action reaches the SDK's card.action.trigger handler",
          ok and c["open_id"] == "ou_user1" and c["value"] == {"pincer_action": "a:once"}
          and c["message_id"] == "om_card1", (p, clicks))
    wait_until(lambda: any(a["event_id"] == p["event_id"] for a in http(control + "/acks")[2]["acks"]))
    a = next(a for a in http(control + "/acks")[2]["acks"] if a["event_id"] == p["event_id"])
    check("... and the SDK's answer (a toast, base64 in the ack's data) is what the fake reads back",
          a["code"] == 200 and a.get("answer_ok") is True and a["answer"]["toast"]["content"] == "收到", a)

    _, _, p = http(control + "/ws/push", {"kind": "post", "text": "富文本"})
    ok = wait_until(lambda: any(g["message_id"] == p["message_id"] for g in got))
    g = next((g for g in got if g["message_id"] == p["message_id"]), {})
    check("a post (rich text) message arrives", ok and g["message_type"] == "post"
          and g["content"]["content"][0][0] == {"tag": "text", "text": "富文本", "style": []}, g)

    _, _, p = http(control + "/ws/push", {"kind": "p2p", "text": "fail-once"})
    ok = wait_until(lambda: any(g["event_id"] == p["event_id"] for g in got), timeout=10)
    _, _, view = http(control + "/acks")
    ev = next(e for e in view["events"] if e["event_id"] == p["event_id"])
    codes = [a["code"] for a in view["acks"] if a["event_id"] == p["event_id"]]
    check("a handler failure acks 500; the fake redelivers the same event_id/message_id, then 200",
          ok and codes == [500, 200] and len(ev["deliveries"]) == 2 and ev["acked"]
          and got[-1]["message_id"] == p["message_id"], (codes, ev))

    st, _, pings = http(control + "/wait?what=pings&count=2&timeout=6")
    ivs = [x["interval"] for x in pings.get("items", []) if x["interval"] is not None]
    check("the SDK pings at the ClientConfig PingInterval (1 s); the fake answers pongs",
          st == 200 and ivs and all(0.5 < i < 2.0 for i in ivs)
          and all(x["service"] > 0 and x["answered"] for x in pings["items"]), pings)

    _, _, r = http(control + "/ws/config", {"PingInterval": 2, "push": True})
    ok = wait_until(lambda: cli._ping_interval == 2, timeout=5)
    check("a pong carrying a new ClientConfig changes the SDK's ping interval", ok and r["sent_to"],
          (cli._ping_interval, r))
    http(control + "/ws/config", {"PingInterval": 1})

    _, _, r = http(control + "/ws/deaf", {"on": True})
    n0 = len(http(control + "/wait?what=pings&count=0")[2]["items"])
    st, _, pings = http(control + f"/wait?what=pings&count={n0 + 1}&timeout=6")
    check("deaf: pings are recorded unanswered (no pong)", st == 200 and pings["items"][-1]["answered"] is False,
          pings["items"][-1:])
    http(control + "/ws/deaf", {"on": False})

    _, _, conns = http(control + "/connections")
    first = [c for c in conns["connections"] if c["open"]][0]["id"]
    _, _, r = http(control + "/ws/close", {"config": {"PingInterval": 1}})

    def reconnected():
        c = http(control + "/connections")[2]
        return c["open"] == 1 and [x for x in c["connections"] if x["open"]][0]["id"] != first

    ok = wait_until(reconnected, timeout=15)
    check("closed by the fake (after a pong with config), the SDK reconnects (ReconnectNonce 0)",
          r["closed"] == [first] and ok, r)
    _, _, p = http(control + "/ws/push", {"kind": "p2p", "text": "重连后"})
    ok = wait_until(lambda: any(g["message_id"] == p["message_id"] for g in got))
    check("... and events flow on the new connection", ok, p)
    _, _, view = http(control + "/acks")
    check("no protocol errors were recorded", view["protocol_errors"] == [], view["protocol_errors"])


def raw_socket(base, control):
    """What the SDK hides: a silent client (never acks) and a bad ticket, over a raw socket
    framed with lark-oapi's own protobuf Frame."""
    import asyncio

    import aiohttp
    from lark_oapi.ws.pb.pbbp2_pb2 import Frame

    async def run():
        _, _, ep = http(base + "/callback/ws/endpoint", {"AppID": APP_ID, "AppSecret": SECRET})
        url = ep["data"]["URL"]
        async with aiohttp.ClientSession() as session:
            try:
                async with session.ws_connect(url.replace("ticket=", "ticket=x")):
                    status = 101
            except aiohttp.WSServerHandshakeError as e:
                status = e.status, (e.headers or {}).get("handshake-status")
            check("a bad ticket -> HTTP 403 with handshake-status 403", status == (403, "403"), status)
            async with session.ws_connect(url) as ws:
                ping = Frame()
                h = ping.headers.add()
                h.key, h.value = "type", "ping"
                ping.SeqID, ping.LogID, ping.method = 0, 0, 0
                ping.service = int(url.split("service_id=")[1].split("&")[0])
                await ws.send_bytes(ping.SerializeToString())
                pong = Frame()
                pong.ParseFromString((await ws.receive(timeout=5)).data)
                hs = {x.key: x.value for x in pong.headers}
                check("a raw ping gets a pong (method 0, type=pong, ClientConfig payload)",
                      pong.method == 0 and hs.get("type") == "pong"
                      and set(json.loads(pong.payload)) == {"ReconnectCount", "ReconnectInterval",
                                                            "ReconnectNonce", "PingInterval"}, (hs, pong.payload))
                conn = http(control + "/connections")[2]["connections"][-1]["id"]
                _, _, p = await asyncio.to_thread(http, control + "/ws/push",
                                                  {"kind": "p2p", "text": "nobody acks", "connection": conn})
                frames = []
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and len(frames) < 4:
                    try:
                        m = await ws.receive(timeout=deadline - time.monotonic())
                    except asyncio.TimeoutError:
                        break
                    f = Frame()
                    f.ParseFromString(m.data)
                    frames.append({x.key: x.value for x in f.headers} | {"payload": json.loads(f.payload)})
                await asyncio.sleep(2)
                ev = next(e for e in http(control + "/acks")[2]["events"] if e["event_id"] == p["event_id"])
                check("never acked: delivered 1 + 3 times with the same event_id/message_id, then given up",
                      len(frames) == 4 and len({f["message_id"] for f in frames}) == 4
                      and all(f["payload"]["header"]["event_id"] == p["event_id"]
                              and f["payload"]["event"]["message"]["message_id"] == p["message_id"]
                              and f["type"] == "event" and f["sum"] == "1" and f["seq"] == "0" and f["trace_id"]
                              for f in frames) and ev["gave_up"] and not ev["acked"], (frames, ev))

    asyncio.run(run())


def webhooks(control):
    seen = []

    def on_message(data: lark.im.v1.P2ImMessageReceiveV1):
        seen.append((data.header.event_id, json.loads(data.event.message.content)["text"]))

    dispatcher = lark.EventDispatcherHandler.builder(ENCRYPT_KEY, TOKEN) \
        .register_p2_im_message_receive_v1(on_message).build()

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            raw = RawRequest()
            raw.uri = self.path
            raw.body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            # Frameworks hand lark-oapi case-insensitive headers (see lark_oapi/adapter/*).
            raw.headers = CaseInsensitiveDict(dict(self.headers.items()))
            resp = dispatcher.do(raw)
            self.send_response(resp.status_code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(resp.content or b"")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/webhook/event"
    try:
        _, _, r = http(control + "/webhook/send", {"url": url, "kind": "url_verification", "challenge": "ch-123"})
        check("encrypted url_verification: lark-oapi answers the challenge",
              r["status"] == 200 and json.loads(r["body"]) == {"challenge": "ch-123"}
              and "encrypt" in json.loads(r["sent"]["body"]), r)
        _, _, r = http(control + "/webhook/send", {"url": url, "kind": "group_mention", "text": "加密事件"})
        check("an encrypted, signed event passes lark-oapi's decryption, token and signature checks",
              r["status"] == 200 and seen and seen[-1][1] == "@_user_1 加密事件", (r["status"], r["body"], seen))
        n = len(seen)
        _, _, r = http(control + "/webhook/send", {"url": url, "kind": "p2p", "text": "明文", "encrypted": False})
        check("a plain (schema 2.0, header.token) signed event passes too",
              r["status"] == 200 and len(seen) == n + 1 and seen[-1][1] == "明文", (r["status"], r["body"]))
        n = len(seen)
        _, _, r = http(control + "/webhook/send", {"url": url, "kind": "p2p", "text": "x", "bad_signature": True})
        check("bad signature is rejected by lark-oapi", r["status"] == 500 and "signature" in r["body"]
              and len(seen) == n, (r["status"], r["body"]))
        _, _, r = http(control + "/webhook/send", {"url": url, "kind": "p2p", "text": "x", "wrong_token": True})
        check("wrong verification token is rejected by lark-oapi", r["status"] == 500
              and "verification_token" in r["body"] and len(seen) == n, (r["status"], r["body"]))
        _, _, r = http(control + "/webhook/send", {"url": url, "kind": "p2p", "text": "stale", "stale": True})
        check("a 6-minute-old timestamp, correctly signed, is ACCEPTED: lark-oapi does not check its age",
              r["status"] == 200 and len(seen) == n + 1, (r["status"], r["body"]))
        n = len(seen)
        _, _, r = http(control + "/webhook/send", {"url": url, "kind": "p2p", "text": "重试", "retries": 2})
        ids = {e for e, _ in seen[n:]}
        check("retries: 2 -> the same event delivered 3 times (dedup is the receiver's job)",
              len(r["attempts"]) == 3 and all(a["status"] == 200 for a in r["attempts"])
              and len(seen) == n + 3 and len(ids) == 1, (r["attempts"], seen[n:]))
    finally:
        server.shutdown()


def list_messages(client, container_type, container_id, **params):
    """im.v1.message.list through the SDK; params are ListMessageRequest builder calls."""
    builder = ListMessageRequest.builder().container_id_type(container_type).container_id(container_id)
    for name, value in params.items():
        builder = getattr(builder, name)(value)
    return client.im.v1.message.list(builder.build())


def ids_of(resp):
    return [m.message_id for m in (resp.data.items or [])] if resp.success() else None


def history(base, control):
    client = sdk_client(base)
    chat = "oc_history_group"
    seed = [{"user": "ou_alice", "text": f"第{i}条"} for i in range(5)] + [{"bot": True, "text": "机器人说过"}]
    _, _, seeded = http(control + "/history", {"chat_id": chat, "messages": seed})
    ids = seeded["message_ids"]
    first = list_messages(client, "chat", chat, page_size=4)
    check("ListMessageRequest (chat): the first page holds 4 of 6 seeded messages, has_more and a page_token",
          ids_of(first) == ids[:4] and first.data.has_more is True and bool(first.data.page_token),
          f"{first.code} {first.msg} {ids_of(first)}")
    second = list_messages(client, "chat", chat, page_size=4, page_token=first.data.page_token or "")
    check("... its page_token gives the rest in create order, and nothing more",
          ids_of(second) == ids[4:] and second.data.has_more is False and not second.data.page_token,
          f"{second.code} {second.msg} {ids_of(second)}")
    user_item, bot_item = first.data.items[0], second.data.items[-1]
    check("items parse as lark-oapi Message: msg_type, body.content JSON, create_time, user / app sender",
          user_item.msg_type == "text" and json.loads(user_item.body.content) == {"text": "第0条"}
          and user_item.chat_id == chat and int(user_item.create_time) > 0 and user_item.deleted is False
          and (user_item.sender.id, user_item.sender.id_type, user_item.sender.sender_type) == ("ou_alice", "open_id", "user")
          and (bot_item.sender.id, bot_item.sender.id_type, bot_item.sender.sender_type) == (APP_ID, "app_id", "app"),
          vars(user_item))
    desc = list_messages(client, "chat", chat, sort_type="ByCreateTimeDesc")
    check("sort_type ByCreateTimeDesc lists newest first", ids_of(desc) == ids[::-1], ids_of(desc))
    changed = list_messages(client, "chat", chat, page_size=4, sort_type="ByCreateTimeDesc",
                            page_token=first.data.page_token or "")
    check("a page_token used with other parameters -> 230001 (the request parameters have changed)",
          changed.code == 230001 and "parameters have changed" in changed.msg, f"{changed.code} {changed.msg}")
    big = list_messages(client, "chat", chat, page_size=51)
    check("page_size 51 -> 230001 The page_size exceeds the limit",
          big.code == 230001 and "page_size exceeds" in big.msg, f"{big.code} {big.msg}")
    bad = list_messages(client, "chat", "chat_42")
    check("a container_id that is no chat id -> 230001 invalid container_id",
          bad.code == 230001 and "invalid container_id" in bad.msg, f"{bad.code} {bad.msg}")

    old_ms = int((time.time() - 3600) * 1000)
    _, _, old = http(control + "/history", {"chat_id": chat, "messages": [{"user": "ou_alice", "text": "一小时前",
                                                                           "create_time": old_ms}]})
    recent = list_messages(client, "chat", chat, start_time=str(int(time.time()) - 600))
    earlier = list_messages(client, "chat", chat, end_time=str(int(time.time()) - 600))
    check("start_time / end_time (seconds) split the chat's history",
          old["message_ids"][0] not in (ids_of(recent) or []) and ids_of(earlier) == old["message_ids"],
          (ids_of(recent), ids_of(earlier)))

    _, _, topic = http(control + "/history", {"chat_id": chat, "messages": [
        {"user": "ou_alice", "text": "话题开头", "thread_id": "omt_topic1"},
        {"user": "ou_bob", "text": "话题回复", "thread_id": "omt_topic1"}]})
    root, reply = topic["message_ids"]
    bot_reply = client.im.v1.message.reply(ReplyMessageRequest.builder().message_id(reply).request_body(
        ReplyMessageRequestBody.builder().msg_type("text").content(json.dumps({"text": "机器人在话题里"}))
        .build()).build())
    in_thread = list_messages(client, "thread", "omt_topic1")
    check("ListMessageRequest (thread): root, the user's reply and the bot's reply to it, all in the thread",
          bot_reply.success() and bot_reply.data.thread_id == "omt_topic1" and bot_reply.data.root_id == root
          and ids_of(in_thread) == [root, reply, bot_reply.data.message_id]
          and [m.thread_id for m in in_thread.data.items] == ["omt_topic1"] * 3
          and in_thread.data.items[1].root_id == root and in_thread.data.items[1].parent_id == root,
          (ids_of(in_thread), bot_reply.code, bot_reply.msg))
    whole = ids_of(list_messages(client, "chat", chat, page_size=50)) or []
    check("... while the chat shows the thread by its root only", root in whole and reply not in whole
          and bot_reply.data.message_id not in whole, whole)
    new_thread = client.im.v1.message.reply(ReplyMessageRequest.builder().message_id(ids[0]).request_body(
        ReplyMessageRequestBody.builder().msg_type("text").content(json.dumps({"text": "开个话题"}))
        .reply_in_thread(True).build()).build())
    started = list_messages(client, "thread", new_thread.data.thread_id if new_thread.success() else "omt_x")
    check("reply_in_thread starts a thread at the replied message (root first, then the reply)",
          ids_of(started) == [ids[0], new_thread.data.message_id], ids_of(started))

    _, _, p = http(control + "/ws/push", {"kind": "group_mention", "text": "推送的", "user": "ou_carol",
                                          "chat_id": chat, "thread_id": "omt_topic1"})
    pushed = list_messages(client, "thread", "omt_topic1").data.items[-1]
    check("a pushed message is kept too: in its thread, with its mention and root",
          pushed.message_id == p["message_id"] and p["root_id"] == root and pushed.root_id == root
          and pushed.mentions and pushed.mentions[0].id == "ou_bot0fake0000000000000000000000"
          and pushed.mentions[0].id_type == "open_id", vars(pushed))

    sent = client.im.v1.message.create(CreateMessageRequest.builder().receive_id_type("open_id").request_body(
        CreateMessageRequestBody.builder().receive_id("ou_dave").msg_type("text")
        .content(json.dumps({"text": "私聊你"}, ensure_ascii=False)).build()).build())
    _, _, p2p = http(control + "/ws/push", {"kind": "p2p", "text": "回你", "user": "ou_dave"})
    dm = list_messages(client, "chat", sent.data.chat_id if sent.success() else "oc_x")
    check("create to an open_id lands in that user's p2p chat (answer's chat_id), shared with the user's pushes",
          sent.success() and sent.data.chat_id.startswith("oc_") and sent.data.chat_id == p2p["chat_id"]
          and ids_of(dm) == [sent.data.message_id, p2p["message_id"]], (sent.code, sent.msg, p2p, ids_of(dm)))
    _, _, msgs = http(control + "/messages")
    last = [m for m in msgs["messages"] if m["kind"] == "create"][-1]
    check("... recorded with receive_id_type open_id and the chat_id",
          last["receive_id_type"] == "open_id" and last["chat_id"] == sent.data.chat_id, last)

    http(control + "/scopes", {"history": False})
    denied = list_messages(client, "chat", chat)
    denied_thread = list_messages(client, "thread", "omt_topic1")
    allowed = list_messages(client, "chat", sent.data.chat_id)
    http(control + "/scopes", {"history": True})
    check("without the group history scope: a group chat or thread -> 230027 Lack of necessary permissions, "
          "parsed by the SDK; p2p history still lists",
          denied.code == 230027 and denied.msg == "Lack of necessary permissions." and not denied.success()
          and denied_thread.code == 230027 and allowed.success(),
          (denied.code, denied.msg, denied_thread.code, allowed.code))


def tiny_png():
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)) \
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")


def get_resource(client, message_id, key, kind):
    return client.im.v1.message_resource.get(GetMessageResourceRequest.builder().message_id(message_id)
                                             .file_key(key).type(kind).build())


def read_and_hang_up(base, path, token, keep):
    """GETs `path` over a raw socket, reads `keep` bytes and closes the socket."""
    host, port = base.split("//")[1].rsplit(":", 1)
    with socket.create_connection((host.strip("[]"), int(port)), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
        got = 0
        while got < keep:
            data = sock.recv(65536)
            if not data:
                break
            got += len(data)
    return got


def files_in(base, control):
    client = sdk_client(base)
    payload = "季度报告 ✓\n".encode() * 300 + bytes(range(256))
    _, _, p = http(control + "/ws/push", {"kind": "p2p", "user": "ou_erin", "file": {
        "name": "报告.pdf", "content_b64": base64.b64encode(payload).decode()}})
    got = get_resource(client, p["message_id"], p["file_key"] or "", "file")
    check("a pushed file: GetMessageResourceRequest returns its bytes, name (Content-Disposition) and type",
          got.success() and got.file.read() == payload and got.file_name == "报告.pdf"
          and got.raw.headers.get("Content-Type") == "application/pdf" and p["file_key"].startswith("file_v3_"),
          (got.code, got.msg, got.file_name, got.raw.headers if got.raw else None))
    acks = http(control + "/acks")[2]
    event = next(e["event"] for e in acks["events"] if e["event_id"] == p["event_id"])
    message = event["event"]["message"]
    check("... the event carried message_type file and content {file_key, file_name}",
          message["message_type"] == "file"
          and json.loads(message["content"]) == {"file_key": p["file_key"], "file_name": "报告.pdf"}, message)
    png = tiny_png()
    _, _, img = http(control + "/ws/push", {"kind": "group_mention", "user": "ou_erin", "chat_id": "oc_files",
                                            "file": {"kind": "image", "content_b64": base64.b64encode(png).decode()}})
    got = get_resource(client, img["message_id"], img["file_key"] or "", "image")
    check("a pushed image (content {image_key}): type=image returns the PNG as image/png",
          got.success() and got.file.read() == png and got.raw.headers.get("Content-Type") == "image/png"
          and img["file_key"].startswith("img_v3_"), (got.code, got.msg))
    wrong_type = get_resource(client, p["message_id"], p["file_key"], "image")
    wrong_message = get_resource(client, img["message_id"], p["file_key"], "file")
    check("type=image for a file key -> 234001; a key of another message -> 234003 File not in msg",
          wrong_type.code == 234001 and wrong_message.code == 234003 and wrong_message.msg == "File not in msg.",
          (wrong_type.code, wrong_type.msg, wrong_message.code, wrong_message.msg))

    _, _, small = http(control + "/ws/push", {"kind": "p2p", "user": "ou_erin", "file": {
        "name": "zeros.bin", "stream_bytes": 300_000}})
    got = get_resource(client, small["message_id"], small["file_key"], "file")
    check("stream_bytes: the download is that many zero bytes", got.success() and got.file.read() == bytes(300_000),
          (got.code, got.msg))
    _, _, large = http(control + "/ws/push", {"kind": "p2p", "user": "ou_erin", "file": {
        "name": "huge.bin", "stream_bytes": 64 * 1024 * 1024}})
    path = f"/open-apis/im/v1/messages/{large['message_id']}/resources/{large['file_key']}?type=file"
    read = read_and_hang_up(base, path, tenant_token(base), 200_000)
    wait_until(lambda: sum(1 for d in http(control + "/downloads")[2]["downloads"] if d["finished_at"]) >= 6)
    downloads = http(control + "/downloads")[2]["downloads"]
    whole = next(d for d in downloads if d["message_id"] == small["message_id"])
    cut = next((d for d in downloads if d["message_id"] == large["message_id"]), {})
    check("/_test/downloads: a whole download (bytes_sent = length) and one the client hung up on",
          whole["bytes_sent"] == whole["length"] == 300_000 and whole["hung_up"] is False
          and cut.get("hung_up") is True and read <= cut["bytes_sent"] < cut["length"] == 64 * 1024 * 1024
          and cut["path"] == path.split("?")[0], (whole, cut, read))
    failed = [d for d in downloads if d["status"] != 200]
    check("... refused downloads are recorded with their code", sorted(d["code"] for d in failed) == [234001, 234003],
          failed)


def files_out(base, control):
    client = sdk_client(base)
    pdf = b"%PDF-1.4\n" + "结论：通过\n".encode() * 50 + b"%%EOF\n"
    up = client.im.v1.file.create(CreateFileRequest.builder().request_body(
        CreateFileRequestBody.builder().file_type("pdf").file_name("结果.pdf").file(io.BytesIO(pdf)).build()).build())
    check("CreateFileRequest (multipart) -> a file_v3_ file_key", up.success() and up.data.file_key.startswith("file_v3_"),
          f"{up.code} {up.msg}")
    png = tiny_png()
    img = client.im.v1.image.create(CreateImageRequest.builder().request_body(
        CreateImageRequestBody.builder().image_type("message").image(io.BytesIO(png)).build()).build())
    check("CreateImageRequest (multipart) -> an img_v3_ image_key",
          img.success() and img.data.image_key.startswith("img_v3_"), f"{img.code} {img.msg}")
    file_key = up.data.file_key if up.success() else "file_v3_x"
    image_key = img.data.image_key if img.success() else "img_v3_x"

    def send(receive_id_type, receive_id, msg_type, content):
        return client.im.v1.message.create(CreateMessageRequest.builder().receive_id_type(receive_id_type).request_body(
            CreateMessageRequestBody.builder().receive_id(receive_id).msg_type(msg_type)
            .content(json.dumps(content)).build()).build())

    file_msg = send("chat_id", "oc_files", "file", {"file_key": file_key})
    image_msg = send("open_id", "ou_frank", "image", {"image_key": image_key})
    check("CreateMessageRequest msg_type file to a chat and image to an open_id",
          file_msg.success() and file_msg.data.msg_type == "file" and file_msg.data.chat_id == "oc_files"
          and image_msg.success() and image_msg.data.chat_id.startswith("oc_p2p_"),
          (file_msg.code, file_msg.msg, image_msg.code, image_msg.msg))
    files = {f["key"]: f for f in http(control + "/files")[2]["files"]}
    f, i = files.get(file_key, {}), files.get(image_key, {})
    check("/_test/files: both uploads with kind, name, type, length, bytes, sha256 and the message that sent them",
          f.get("kind") == "file" and f.get("name") == "结果.pdf" and f.get("file_type") == "pdf"
          and f.get("length") == len(pdf) and base64.b64decode(f.get("content_b64", "")) == pdf
          and f.get("sha256") == hashlib.sha256(pdf).hexdigest()
          and f.get("messages") == [{"message_id": file_msg.data.message_id, "chat_id": "oc_files", "root_id": "",
                                     "thread_id": ""}]
          and i.get("kind") == "image" and i.get("image_type") == "message" and i.get("length") == len(png)
          and [m["chat_id"] for m in i.get("messages", [])] == [image_msg.data.chat_id], (f, i))
    got = get_resource(client, file_msg.data.message_id, file_key, "file")
    check("the bot's own file message can be downloaded back", got.success() and got.file.read() == pdf,
          (got.code, got.msg))

    unknown = send("chat_id", "oc_files", "image", {"image_key": "img_v3_never_uploaded"})
    swapped = send("chat_id", "oc_files", "file", {"file_key": image_key})
    _, _, pushed = http(control + "/ws/push", {"kind": "p2p", "user": "ou_frank", "file": {"name": "a.txt",
                                                                                          "content": "hi"}})
    theirs = send("chat_id", "oc_files", "file", {"file_key": pushed["file_key"]})
    check("a key never uploaded -> 230001 invalid image_key; an image key as a file -> invalid file_key; "
          "a user's key -> 230017",
          unknown.code == 230001 and "invalid image_key" in unknown.msg and swapped.code == 230001
          and "invalid file_key" in swapped.msg and theirs.code == 230017,
          (unknown.code, unknown.msg, swapped.code, swapped.msg, theirs.code, theirs.msg))

    def upload_file(data, file_type="stream"):
        return client.im.v1.file.create(CreateFileRequest.builder().request_body(
            CreateFileRequestBody.builder().file_type(file_type).file_name("x.bin").file(io.BytesIO(data))
            .build()).build())

    def upload_image(data):
        return client.im.v1.image.create(CreateImageRequest.builder().request_body(
            CreateImageRequestBody.builder().image_type("message").image(io.BytesIO(data)).build()).build())

    empty, bad_type = upload_file(b""), upload_file(b"x", file_type="exe")
    too_big = upload_file(bytes(30 * 1024 * 1024 + 1))
    not_image, big_image = upload_image(b"plain text"), upload_image(png[:8] + bytes(10 * 1024 * 1024))
    check("uploads refused as documented: empty 234010, bad file_type 234001, file > 30 MB 234006, "
          "not an image 234011, image > 10 MB 234006",
          (empty.code, bad_type.code, too_big.code, not_image.code, big_image.code)
          == (234010, 234001, 234006, 234011, 234006),
          [(r.code, r.msg) for r in (empty, bad_type, too_big, not_image, big_image)])


def card_updates(base, control):
    client = sdk_client(base)

    def card(text):
        return json.dumps({"schema": "2.0", "config": {"update_multi": True},
                           "body": {"elements": [{"tag": "markdown", "content": text}]}}, ensure_ascii=False)

    created = client.im.v1.message.create(CreateMessageRequest.builder().receive_id_type("chat_id").request_body(
        CreateMessageRequestBody.builder().receive_id("oc_cards").msg_type("interactive").content(card("0"))
        .build()).build())
    mid = created.data.message_id if created.success() else "om_x"

    def patch(text):
        return client.im.v1.message.patch(PatchMessageRequest.builder().message_id(mid).request_body(
            PatchMessageRequestBody.builder().content(card(text)).build()).build())

    results = []
    for i in range(3):
        results.append(patch(f"第{i + 1}版"))
        time.sleep(0.15)
    updates = http(control + f"/updates?message_id={mid}")[2]["updates"]
    check("/_test/updates: each PATCH of the card with its time and the spacing since the previous one",
          all(r.success() for r in results) and len(updates) == 3 and updates[0]["interval"] is None
          and all(0.1 < u["interval"] < 1.0 for u in updates[1:]) and all(u["ok"] for u in updates)
          and json.loads(updates[-1]["content"])["body"]["elements"][0]["content"] == "第3版", updates)
    listed = list_messages(client, "chat", "oc_cards").data.items[0]
    check("... and the stored card is the last version, marked updated",
          listed.updated is True and "第3版" in listed.body.content, vars(listed))

    _, _, armed = http(control + "/ratelimit", {"target": "patch", "count": 1})
    limited = patch("被限流")
    after = patch("限流之后")
    check("/_test/ratelimit target patch: the next PATCH gets 230020 (per-message frequency limit), then none",
          armed["ratelimit"]["code"] == 230020 and limited.code == 230020 and after.success(),
          (armed, limited.code, limited.msg, after.code))
    time.sleep(1.0)  # a quiet second: no accepted PATCH left in the window
    http(control + "/ratelimit", {"target": "patch", "per_message_qps": 5})
    started = time.monotonic()
    burst = [patch(f"连发{i}").code for i in range(7)]
    took = time.monotonic() - started
    http(control + "/ratelimit", {"target": "patch", "per_message_qps": 0})
    check("per_message_qps 5: a burst of 7 PATCHes to one card within a second -> 5 accepted, then 230020",
          took >= 1.0 or burst == [0] * 5 + [230020] * 2, (burst, took))
    check("... and per_message_qps 0 lifts it", patch("恢复").success())
    send_default = http(control + "/ratelimit", {"count": 1})[2]
    check("... and /_test/ratelimit without a target still arms sends (99991400, HTTP 429)",
          send_default["target"] == "send" and send_default["ratelimit"]["code"] == 99991400
          and send_default["ratelimit"]["status"] == 429, send_default)
    http(control + "/ratelimit", {"count": 0})


def no_history_scope_flag():
    proc, ready = start_fake("--no-history-scope")
    try:
        client = sdk_client(ready["base"])
        http(ready["control"] + "/history", {"chat_id": "oc_team", "messages": [{"user": "ou_a", "text": "hi"}]})
        denied = list_messages(client, "chat", "oc_team")
        check("--no-history-scope: listing a group chat answers 230027, which the SDK parses",
              denied.code == 230027 and denied.msg == "Lack of necessary permissions.", f"{denied.code} {denied.msg}")
    finally:
        stop_fake(proc)


def crypto_vectors():
    # https://open.feishu.cn/document/ukTMukTMukTM/uYDNxYjL2QTM24iN0EjN/event-subscription-configure-/encrypt-key-encryption-configuration-case
    # ("解密示例"): key "test key", this ciphertext decrypts to "hello world".
    plain = AESCipher("test key").decrypt_str("P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=")
    check("docs example: lark-oapi's AESCipher decrypts the vector to 'hello world'", plain == "hello world", plain)
    sys.path.insert(0, HERE)
    import fake_feishu
    mine = fake_feishu.decrypt("test key", "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=")
    check("docs example: the fake's own decrypt agrees", mine == "hello world", mine)
    enc = fake_feishu.encrypt("test key", "hello world 你好")
    check("the fake's encrypt round-trips through lark-oapi's AESCipher",
          AESCipher("test key").decrypt_str(enc) == "hello world 你好", enc)


def main() -> None:
    crypto_vectors()
    proc, ready = start_fake("--ping-interval", "1", "--reconnect-nonce", "0", "--reconnect-interval", "1",
                             "--ack-timeout", "1.5")
    try:
        check("ready line has port, base, control", set(ready) == {"port", "base", "control"}, ready)
        base, control = ready["base"], ready["control"]
        for name, fn in (("open_api", lambda: open_api(base, control)),
                         ("long_connection", lambda: long_connection(base, control)),
                         ("raw_socket", lambda: raw_socket(base, control)),
                         ("webhooks", lambda: webhooks(control)),
                         ("history", lambda: history(base, control)),
                         ("files_in", lambda: files_in(base, control)),
                         ("files_out", lambda: files_out(base, control)),
                         ("card_updates", lambda: card_updates(base, control)),
                         ("no_history_scope_flag", no_history_scope_flag)):
            try:
                fn()
            except Exception:  # noqa: BLE001 - a crashed section is a failed check
                traceback.print_exc()
                check(f"{name} ran to the end", False, "exception")
    finally:
        check("SIGTERM -> exit 0", stop_fake(proc) == 0, None)
    print(f"{'FAILED' if failures else 'all checks held'} ({len(failures)} failed)", flush=True)
    sys.stdout.flush()
    # The SDK's ws client thread runs forever on its module-level loop; don't wait for it.
    os._exit(1 if failures else 0)


if __name__ == "__main__":
    main()
