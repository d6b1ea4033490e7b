"""A local fake of Feishu/Lark for pincer's end-to-end tests: Open API, long connection, webhook sender.

Usage: fake_feishu.py [--host 127.0.0.1] [--port 0] [--app-id cli_fake] [--app-secret S]
                      [--encrypt-key K] [--verification-token T] [--token-ttl 7200]
                      [--ping-interval 120] [--reconnect-count -1] [--reconnect-interval 120]
                      [--reconnect-nonce 30] [--ack-timeout 3] [--bot-open-id ou_bot...]
                      [--bot-name pincer-bot] [--bot-activate-status 2] [--tenant-key T]
                      [--no-history-scope]
Every flag can also be given by environment, FAKE_FEISHU_<FLAG> (e.g. FAKE_FEISHU_APP_SECRET);
flags win.

Serves on loopback only. When ready it prints one JSON line to stdout,
  {"port": N, "base": "http://127.0.0.1:N", "control": "http://127.0.0.1:N/_test"}
and serves until killed (SIGTERM or SIGINT: exit 0). Point an SDK's base domain at "base".
Start-up takes ~0.3 s: the SDK's package __init__s, which import the whole SDK, are skipped.

Sources. Long-connection protocol: the official Python SDK lark-oapi 1.7.5 (PyPI), read from its
installed source: lark_oapi/ws/client.py (endpoint POST body, frame handling, ping loop, ack
frame), lark_oapi/ws/const.py (URI, header names, error codes), lark_oapi/ws/model.py
(EndpointResp / ClientConfig fields), lark_oapi/ws/enum.py (FrameType / MessageType), and frames
are (de)serialised with the SDK's own protobuf classes lark_oapi.ws.pb.pbbp2_pb2.Frame/Header.
Open API and webhooks: Feishu's docs (URLs at each handler); request/response shapes also match
lark-oapi's models (lark_oapi/api/im/v1/model/: Message, ListMessageResponseBody,
CreateFileRequestBody, CreateImageRequestBody, ...).

Open API (JSON; every call recorded: method, path, query, headers, body, answer, status, time)
  POST /open-apis/auth/v3/tenant_access_token/internal {app_id, app_secret}
       -> {"code":0,"msg":"ok","tenant_access_token":"t-...","expire":TTL}; a fresh token each
          call; wrong app_id/secret -> HTTP 400 {"code":10014,"msg":"app secret invalid"}
  POST /callback/ws/endpoint {AppID, AppSecret} -> {"code":0,"msg":"ok","data":{"URL":
          "ws://127.0.0.1:N/ws?device_id=..&service_id=..&ticket=..","ClientConfig":{...}}}
  GET  /open-apis/bot/v3/info                       -> {"code":0,"msg":"ok","bot":{...}}
  POST /open-apis/im/v1/messages?receive_id_type=chat_id|open_id|user_id|union_id|email
       -> {"code":0,"msg":"success","data":Message}; to an open_id the message lands in that
          user's p2p chat "oc_p2p_"+open_id[3:19] (the chat its pushes use), data.chat_id says so
  POST /open-apis/im/v1/messages/{message_id}/reply  {"msg_type","content","reply_in_thread"}
       joins the parent's chat; root_id = the parent's root or the parent; reply_in_thread starts
       (or joins) the thread "omt_"+root[3:15]
       msg_type "interactive": the content must be a card JSON 2.0 whose elements and buttons
       are of the documented shape (else code 230099); a post or text as before; "image"
       {"image_key"} / "file"|"audio"|"media" {"file_key"} must name a key this bot uploaded as
       that kind (unknown: 230001 ext=invalid image_key / invalid file_key; a key a user sent:
       230017)
  PATCH /open-apis/im/v1/messages/{message_id}     {"content": card} : replaces a card the bot
       sent (unknown or not a card: code 230001); every attempt is kept (/_test/updates)
  GET  /open-apis/im/v1/messages?container_id_type=chat|thread&container_id=&start_time=&end_time=
       &sort_type=ByCreateTimeAsc|ByCreateTimeDesc&page_size=1..50 (20)&page_token=
       -> {"code":0,"msg":"success","data":{"has_more","page_token" (only when has_more),
          "items":[{message_id, root_id?, parent_id?, thread_id?, msg_type, create_time,
          update_time, deleted, updated, chat_id, sender{id,id_type,sender_type,tenant_key},
          body{content}, mentions?}]}}; a chat lists a thread by its root only; start/end are
          seconds (ignored for a thread); 230001 with ext= invalid container_id_type / invalid
          container_id / invalid sort_type / The page_size exceeds the limit / invalid
          start_time|end_time / The end_time is earlier than the start_time / invalid page_token
          / the request parameters have changed, page_token is invalid; without the history
          scope (--no-history-scope or /_test/scopes) a group chat or thread -> 230027
  POST /open-apis/im/v1/files   multipart file_type (opus|mp4|pdf|doc|xls|ppt|stream), file_name,
       duration?, file -> {"code":0,"msg":"success","data":{"file_key":"file_v3_..."}}
  POST /open-apis/im/v1/images  multipart image_type (message|avatar), image
       -> {"code":0,"data":{"image_key":"img_v3_..."},"msg":"success"}
       errors (HTTP 400): 234001 missing/unknown field, 234010 empty, 234006 over 30 MB (file)
       / 10 MB (image), 234011 not an image format Feishu takes
  GET  /open-apis/im/v1/messages/{message_id}/resources/{key}?type=file|image -> 200 the bytes,
       Content-Type, Content-Disposition: attachment; filename="N"; filename*=UTF-8''N;
       errors (HTTP 400): 234001 type missing/wrong for the key, 234003 "File not in msg." (the
       key is not that message's)
  POST /open-apis/ephemeral/v1/send  {"chat_id", "open_id", "msg_type": "interactive", "card"}
       -> {"code":0,"data":{"message_id"}} : a card one member sees
  POST /open-apis/im/v1/messages/{message_id}/reactions
  DELETE /open-apis/im/v1/messages/{message_id}/reactions/{reaction_id}
       The im and bot calls need `Authorization: Bearer <tenant token>`: none -> HTTP 400
       code 99991661, unknown or expired -> HTTP 400 code 99991663. Sends (create, reply) can be
       rate limited: HTTP 429, x-ogw-ratelimit-limit / x-ogw-ratelimit-reset, code 99991400;
       PATCHes too (by default HTTP 400 code 230020, Feishu's per-message 5 QPS answer).

Long connection, `GET /ws?device_id=&service_id=&ticket=` (WebSocket, binary protobuf frames):
  an unknown ticket -> HTTP 403 with handshake-status/handshake-msg headers (what the SDK reads).
  Client ping (method 0, type=ping) -> pong (method 0, type=pong, payload = ClientConfig JSON),
  recorded with the interval since the previous ping. Events go out as data frames (method 1,
  headers type=event, message_id, sum, seq, trace_id), optionally split into 3 frames. The client
  acks by sending the frame back with a biz_rt header and payload {"code":200,...}; an event not
  acked with 200 within --ack-timeout (or whose socket dropped) is redelivered, same event_id and
  IM message_id but a new frame message_id, on the newest live connection, at most 3 times.

Control API, JSON in and out (POST bodies may be empty; `connection` = the newest open one):
  POST /_test/ws/push      {"kind": "p2p"|"group_mention"|"post"|"card_action", "text", "user" (open_id),
                            "chat_id", "split": bool or "token" (cut in the verification token), "message_id", "event_id", "connection",
                            "root_id", "parent_id", "thread_id" (in that thread; root/parent
                            default to its root), card_action: "message_id" (the card's),
                            "value" (the button's callback value),
                            "file": {"name", "content_b64" | "content" (text) | "stream_bytes": N
                            (download streams N zero bytes), "kind": "file"|"image" (file)}:
                            a file message {"file_key":"file_v3_...","file_name"} or an image
                            {"image_key":"img_v3_..."} (no text, no mentions)}
                           (a card_action is answered with a toast; the ack's `answer` is the
                            decoded data, `answer_ok` whether lark-oapi's
                            P2CardActionTriggerResponse reads a toast from it)
                           -> {"event_id", "message_id", "frame_message_id", "delivered_to",
                               message kinds also "chat_id", "thread_id", "root_id", "file_key"}
                           (no open connection: delivered_to null, sent when one opens)
                           Every message pushed or webhook-sent, and every one the bot sends,
                           is kept for message/list.
  POST /_test/ws/close     {"connection", "all": bool, "code": 1000, "config": {ClientConfig
                            fields} (first send a pong carrying this config), "abrupt": bool
                            (TCP abort, no close frame)}
                           -> {"closed": [ids]}
  POST /_test/ws/deaf      {"on": bool, "connection"} : stop/resume answering pings (no pong)
  POST /_test/ws/config    {"PingInterval", "ReconnectCount", "ReconnectInterval",
                            "ReconnectNonce", "push": bool (send a pong with it to every open
                            connection now)} -> {"config"}; also used by later endpoints/pongs
  POST /_test/tokens/expire                 -> {"expired": n} every token issued so far
  POST /_test/endpoint/fail {"count": K, "code": 1 (SYSTEM_BUSY), "msg": "system busy"} : the next
                            K calls of /callback/ws/endpoint answer {"code", "msg"} with HTTP 200
  POST /_test/ratelimit    {"target": "send" (create/reply) | "patch", "count": K (1), "reset": S
                            (52), "limit": L (100), "status", "code" (send: 429 / 99991400 with
                            x-ogw headers; patch: 400 / 230020), "per_message_qps": Q (patch
                            only: from now on a PATCH to a message that had Q accepted ones in
                            the last second gets 230020; 0 stops it; count then defaults to 0)}
                            : the next K calls of target are rate limited
                           -> {"target", "ratelimit": {...}, "per_message_qps"}
  POST /_test/history      {"chat_id": "oc_...", "chat_type": "p2p"|"group" (oc_p2p_*: p2p),
                            "messages": [{"user" (open_id), "text", "bot": bool, "thread_id",
                            "root_id", "parent_id", "create_time" (ms, default now)}]}
                            : stores text messages, no events -> {"chat_id", "message_ids"}
  GET  /_test/history?chat_id=&thread_id=  -> {"messages": [stored records]}
  GET  /_test/files         -> {"files": [{"key", "kind": "file"|"image", "name", "file_type" |
                               "image_type", "duration", "content_type", "length", "content_b64",
                               "sha256", "at", "messages": [{"message_id", "chat_id", "root_id",
                               "thread_id"}]}]} every upload, and the messages that sent it
  GET  /_test/downloads     -> {"downloads": [{"path", "message_id", "file_key", "type", "status",
                               "code", "length", "bytes_sent", "hung_up", "at", "finished_at"}]}
  GET  /_test/updates?message_id=  -> {"updates": [{"message_id", "at", "interval" (s since the
                               previous PATCH of that message, null first), "ok", "code",
                               "content"}]}
  POST /_test/scopes        {"history": bool} -> {"history"} : grant/revoke the group history scope
  POST /_test/slow         {"path": P (exact, or a prefix ending in *), "seconds": S}
                            : Open API calls to P answer S seconds late (S 0: no longer)
  POST /_test/webhook/send {"url", "kind": "p2p"|"group_mention"|"post"|"url_verification"|"card_action",
                            "text", "user", "chat_id", "event_id", "message_id", "challenge",
                            "encrypted": bool (default: an encrypt key is set), "bad_signature",
                            "wrong_token", "stale" (timestamp 6 min old, correctly signed),
                            "retries": n (0..4: the same body sent 1+n times), "until_ok": bool
                            (stop retrying once HTTP 200), "retry_interval": s (0.2),
                            "timeout": s (10), "body": raw string sent as is}
                           -> {"attempts": [{"status", "body", "elapsed_ms", "headers"}],
                               "status", "body", "elapsed_ms", "sent": {...}}
  GET  /_test/calls?path=P  -> {"calls": [...]} (P: exact path, or a prefix ending in *)
  GET  /_test/acks          -> {"acks": [...], "events": [...], "protocol_errors": [...]}
  GET  /_test/connections   -> {"open": n, "connections": [...]} with pings, pongs, frames
  GET  /_test/messages      -> {"messages": [...], "reactions": [...]} what the bot sent
  GET  /_test/webhooks      -> {"sent": [...]} every webhook/send
  GET  /_test/wait?what=calls|acks|connections|pings|deliveries|webhooks|messages|history|files
                   |downloads|updates&path=P&count=N&timeout=S  -> 200 {"count", "items"} once N,
                   else 408 (connections counts open ones; pings counts all pings recorded;
                   history: path = chat_id; downloads: finished ones; updates: path = message_id)
  POST /_test/reset         {"close_sockets": bool} : forget calls, acks, events, messages,
                            reactions, rate limits, webhooks sent, closed connections, the message
                            store, uploads, downloads, updates; the history scope back to the flag
"""

import argparse
import asyncio
import base64
import hashlib
import json
import mimetypes
import os
import re
import secrets
import sys
import time
import uuid
from urllib.parse import quote

import aiohttp
from aiohttp import web

import fake_control
from fake_control import json_body
from Crypto.Cipher import AES


def _skip_package_init(name):
    """Registers package `name` without running its __init__.py, so that its
    submodules import alone. lark_oapi's, lark_oapi.ws's and lark_oapi.event's
    import the whole SDK (about 10,000 modules, 2.5 s of CPU in every test that
    starts this fake); the classes imported below are the SDK's own either way."""
    import importlib.util
    import types

    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    package = types.ModuleType(name)
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules[name] = package


for _package in ("lark_oapi", "lark_oapi.ws", "lark_oapi.event"):
    _skip_package_init(_package)

from lark_oapi.core.json import JSON  # noqa: E402
from lark_oapi.event.callback.model.p2_card_action_trigger import P2CardActionTriggerResponse  # noqa: E402
from lark_oapi.ws.pb.pbbp2_pb2 import Frame  # noqa: E402

LOOPBACK = {"127.0.0.1", "::1", "localhost"}
MAX_REDELIVERIES = 3
MAX_WEBHOOK_RETRIES = 4  # "最多重试4次" — Feishu's webhook push retry rule (see ctl_webhook_send)

# lark_oapi/ws/enum.py: FrameType.CONTROL = 0, FrameType.DATA = 1; MessageType values.
FRAME_CONTROL = 0
FRAME_DATA = 1
# lark_oapi/ws/const.py
GEN_ENDPOINT_URI = "/callback/ws/endpoint"
HEADER_TYPE = "type"
HEADER_MESSAGE_ID = "message_id"
HEADER_SUM = "sum"
HEADER_SEQ = "seq"
HEADER_TRACE_ID = "trace_id"
HEADER_BIZ_RT = "biz_rt"
HEADER_HANDSHAKE_STATUS = "handshake-status"
HEADER_HANDSHAKE_MSG = "handshake-msg"
WS_FORBIDDEN = 403
WS_AUTH_FAILED = 514

# Gateway codes, https://open.feishu.cn/document/server-docs/api-call-guide/generic-error-code
CODE_MISSING_TOKEN = 99991661
CODE_INVALID_TOKEN = 99991663
# https://open.feishu.cn/document/server-docs/api-call-guide/frequency-control : HTTP 429,
# x-ogw-ratelimit-limit / x-ogw-ratelimit-reset, {"code": 99991400, "msg": "request trigger
# frequency limit"}. (lark_oapi/channel/errors.py files 99991400 under permission denials; the
# fake follows the docs.)
CODE_RATE_LIMIT = 99991400
# https://open.feishu.cn/document/server-docs/authentication-management/access-token/tenant_access_token_internal
# points to the auth error codes; 10014 is "app secret invalid", 10003 "invalid param".
CODE_BAD_SECRET = 10014
CODE_BAD_PARAM = 10003
RECEIVE_ID_TYPES = {"open_id", "user_id", "union_id", "email", "chat_id"}
DEFAULT_USER = "ou_84aad35d084aa403a838cf73ee18467"  # the receive event docs' example sender

# IM error codes. 230001 carries the reason after "ext=" (the 230001 FAQ,
# https://open.feishu.cn/document/faq/trouble-shooting/how-to-resolve-error-230001, lists the ext
# texts the fake uses: invalid container_id, The page_size exceeds the limit, invalid file_key, ...).
CODE_IM_BAD_PARAM = 230001
# https://open.feishu.cn/document/server-docs/im-v1/message/create error table: 230017 "Bot is NOT
# the owner of the resource." (a bot sends only keys it uploaded); 230020 "This operation triggers
# the frequency limit."; 230027 "Lack of necessary permissions." (also message/list's answer when
# the app lacks "获取群组中所有消息", im:message.group_msg).
CODE_NOT_OWNER = 230017
CODE_MESSAGE_RATE_LIMIT = 230020
CODE_NO_PERMISSION = 230027
RATE_LIMIT_MSGS = {CODE_RATE_LIMIT: "request trigger frequency limit",
                   CODE_MESSAGE_RATE_LIMIT: "This operation triggers the frequency limit."}

# message/list, https://open.feishu.cn/document/server-docs/im-v1/message/list: container_id_type
# chat (p2p and group) or thread; sort_type ByCreateTimeAsc (default) | ByCreateTimeDesc; page_size
# 1..50, default 20; start_time/end_time in seconds (a thread container ignores them).
LIST_SORTS = ("ByCreateTimeAsc", "ByCreateTimeDesc")
LIST_PAGE_SIZE = 20
LIST_MAX_PAGE_SIZE = 50

# Resources. Upload: https://open.feishu.cn/document/server-docs/im-v1/file/create (file_type
# opus|mp4|pdf|doc|xls|ppt|stream, file_name, duration ms, file; at most 30 MB, never empty) and
# https://open.feishu.cn/document/server-docs/im-v1/image/create (image_type message|avatar, image;
# at most 10 MB; JPG JPEG PNG WEBP GIF BMP ICO TIFF HEIC). Download:
# https://open.feishu.cn/document/server-docs/im-v1/message/get-2 (GET
# /open-apis/im/v1/messages/:message_id/resources/:file_key?type=image|file, the bytes with their
# Content-Type). Their error tables: 234001 "Invalid request param.", 234003 "File not in msg."
# (the docs' table words it "File not in message."; the live API, as clients quote it, answers
# "File not in msg."), 234006 "The file size exceed the max value.", 234010 "File's size can't be
# 0.", 234011 "Can't regonnize the image format." (sic).
UPLOAD_KINDS = {"/open-apis/im/v1/files": "file", "/open-apis/im/v1/images": "image"}
RESOURCE_PATH = re.compile(r"^/open-apis/im/v1/messages/([^/]+)/resources/([^/]+)$")
FILE_TYPES = {"opus", "mp4", "pdf", "doc", "xls", "ppt", "stream"}
IMAGE_TYPES = {"message", "avatar"}
MAX_UPLOAD_BYTES = {"file": 30 * 1024 * 1024, "image": 10 * 1024 * 1024}
CODE_RES_BAD_PARAM = 234001
CODE_RES_NOT_IN_MESSAGE = 234003
CODE_RES_TOO_BIG = 234006
CODE_RES_EMPTY = 234010
CODE_RES_BAD_IMAGE = 234011
# The key field each resource message's content carries (create_json: image {"image_key"}, file
# and audio {"file_key"}, media {"file_key", "image_key"}), and the upload kind it must name.
RESOURCE_FIELDS = {"image": ("image_key", "image"), "file": ("file_key", "file"),
                   "audio": ("file_key", "file"), "media": ("file_key", "file")}
STREAM_CHUNK = 64 * 1024


CARD_BUTTON_TYPES = {"default", "primary", "danger", "text", "primary_text", "danger_text",
                     "primary_filled", "danger_filled", "laser"}


def card_problem(card):
    """Why Feishu would refuse `card` (a dict) as card JSON 2.0, or None: the structure of
    https://open.feishu.cn/document/feishu-cards/card-json-v2-structure (schema "2.0", body
    elements), markdown components with content, column sets of columns, and buttons with plain
    text, a documented type and callback behaviors
    (https://open.feishu.cn/document/feishu-cards/card-json-v2-components/interactive-components/button),
    each with a `name` unique in the card (Feishu answers 200340 without one)."""
    if not isinstance(card, dict) or card.get("schema") != "2.0":
        return "schema must be 2.0"
    elements = (card.get("body") or {}).get("elements")
    if not isinstance(elements, list) or not elements:
        return "body.elements must be a non-empty list"
    names = set()

    def check(element):
        tag = element.get("tag") if isinstance(element, dict) else None
        if tag == "markdown":
            return None if isinstance(element.get("content"), str) else "markdown without content"
        if tag == "column_set":
            for column in element.get("columns") or []:
                if column.get("tag") != "column":
                    return "a column_set holds columns"
                for inner in column.get("elements") or []:
                    why = check(inner)
                    if why:
                        return why
            return None
        if tag == "button":
            text = element.get("text") or {}
            if text.get("tag") != "plain_text" or not text.get("content"):
                return "a button needs plain_text text"
            name = element.get("name")
            if not name:
                return "200340: a button needs a name"
            if name in names:
                return f"200340: the button name {name!r} is used twice"
            names.add(name)
            if element.get("type", "default") not in CARD_BUTTON_TYPES:
                return f"unknown button type {element.get('type')!r}"
            for behavior in element.get("behaviors") or []:
                if behavior.get("type") != "callback" or not isinstance(behavior.get("value"), dict):
                    return "a button's behavior must be a callback with a value object"
            return None
        return f"unknown component {tag!r}"

    for element in elements:
        why = check(element)
        if why:
            return why
    return None


def card_error(why):
    """Feishu's answer to a card it refuses: 200340 for a button without a unique name, else
    230099 ("Failed to create card content")."""
    if why.startswith("200340"):
        return 400, {"code": 200340, "msg": f"card json error, ext={why}"}, None
    return 400, {"code": 230099, "msg": f"Failed to create card content, ext={why}"}, None


def invalid_param(ext):
    """Feishu's 230001 answer naming the bad parameter after "ext=" (the 230001 FAQ's form)."""
    return 400, {"code": CODE_IM_BAD_PARAM,
                 "msg": f"Your request contains an invalid request parameter, ext={ext}."}, None


def compact_json(value) -> str:
    """A message content string as Feishu writes one: {"text":"hi"}, no spaces."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def resource_error(code, msg):
    """An upload/download error from the resource APIs' error tables (all HTTP 400)."""
    return 400, {"code": code, "msg": msg}, None


# Leading bytes of the image formats image/create accepts.
IMAGE_SIGNATURES = [(b"\xff\xd8\xff", "image/jpeg"), (b"\x89PNG\r\n\x1a\n", "image/png"),
                    (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"), (b"BM", "image/bmp"),
                    (b"II*\x00", "image/tiff"), (b"MM\x00*", "image/tiff"),
                    (b"\x00\x00\x01\x00", "image/x-icon")]


def image_mime(data: bytes):
    """The MIME type of an image in a format Feishu accepts, or None."""
    for magic, mime in IMAGE_SIGNATURES:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[4:8] == b"ftyp" and data[8:12] in (b"heic", b"heix", b"mif1", b"msf1"):
        return "image/heic"
    return None


def parse_file_spec(spec):
    """A push's "file" field -> {"kind", "name", "data" (bytes or None), "stream_bytes"}; raises
    ValueError when it is not one the fake can serve."""
    if not isinstance(spec, dict):
        raise ValueError("file must be an object")
    kind = spec.get("kind", "file")
    if kind not in ("file", "image"):
        raise ValueError(f"file.kind must be file or image, not {kind!r}")
    data, stream_bytes = None, None
    if spec.get("stream_bytes") is not None:
        stream_bytes = int(spec["stream_bytes"])
        if stream_bytes < 0:
            raise ValueError("file.stream_bytes must be >= 0")
    elif "content_b64" in spec:
        data = base64.b64decode(spec["content_b64"], validate=True)  # binascii.Error is a ValueError
    elif "content" in spec:
        data = str(spec["content"]).encode("utf-8")
    else:
        raise ValueError("file needs content_b64, content or stream_bytes")
    name = spec.get("name") or ("file.bin" if kind == "file" else "image.png")
    return {"kind": kind, "name": name, "data": data, "stream_bytes": stream_bytes}


def now() -> float:
    return time.time()


def ms() -> str:
    return str(int(now() * 1000))


# ---- Feishu webhook crypto ---------------------------------------------------------------------
# https://open.feishu.cn/document/ukTMukTMukTM/uYDNxYjL2QTM24iN0EjN/event-subscription-configure-/encrypt-key-encryption-configuration-case
# Encryption: AES-256-CBC, key = SHA-256(encrypt_key), a random 16-byte IV prefixed to the
# ciphertext, PKCS7 padding, base64 of iv + ciphertext. lark-oapi only decrypts
# (lark_oapi/core/utils/decryptor.py AESCipher); this is its inverse, with pycryptodome, the
# library lark-oapi itself depends on.


def encrypt(encrypt_key: str, plaintext: str, iv: bytes = None) -> str:
    key = hashlib.sha256(encrypt_key.encode("utf-8")).digest()
    iv = iv or os.urandom(16)
    data = plaintext.encode("utf-8")
    pad = 16 - len(data) % 16
    data += bytes([pad]) * pad
    return base64.b64encode(iv + AES.new(key, AES.MODE_CBC, iv).encrypt(data)).decode("ascii")


def decrypt(encrypt_key: str, encrypted: str) -> str:
    key = hashlib.sha256(encrypt_key.encode("utf-8")).digest()
    raw = base64.b64decode(encrypted)
    s = AES.new(key, AES.MODE_CBC, raw[:16]).decrypt(raw[16:])
    return s[: -s[-1]].decode("utf-8")


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    # Same page, "签名校验": sha256(timestamp + nonce + encrypt_key + raw body), hex.
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


# ---- frames --------------------------------------------------------------------------------------


def frame_headers(frame) -> dict:
    return {h.key: h.value for h in frame.headers}


def new_frame(method, service, headers, payload=b"", seq_id=0, log_id=0) -> Frame:
    f = Frame()
    f.SeqID = seq_id
    f.LogID = log_id
    f.service = service
    f.method = method
    for k, v in headers:
        h = f.headers.add()
        h.key = k
        h.value = str(v)
    if payload:
        f.payload = payload
    return f


class Conn:
    def __init__(self, cid, ws, request, device_id, service_id):
        self.id = cid
        self.ws = ws
        self.request = request
        self.device_id = device_id
        self.service_id = service_id
        self.opened_at = now()
        self.closed_at = None
        self.close_code = None
        self.closed_by = None
        self.deaf = False
        self.pings = []
        self.pongs = []
        self.frames_sent = []
        self.frames_received = 0
        self.lock = asyncio.Lock()

    @property
    def open(self):
        return self.closed_at is None

    def describe(self):
        return {
            "id": self.id,
            "device_id": self.device_id,
            "service_id": self.service_id,
            "opened_at": self.opened_at,
            "closed_at": self.closed_at,
            "close_code": self.close_code,
            "closed_by": self.closed_by,
            "open": self.open,
            "deaf": self.deaf,
            "pings": list(self.pings),
            "pongs": list(self.pongs),
            "frames_sent": list(self.frames_sent),
            "frames_received": self.frames_received,
        }


class Fake:
    def __init__(self, cfg):
        self.cfg = cfg
        self.port = None
        self.host = cfg.host
        self.counter = 0
        self.conn_counter = 0
        self.seq = 0
        self.changed = asyncio.Condition()
        self.conns = {}
        self.tickets = {}
        self.tokens = {}  # token -> expires_at
        self.client_config = {
            "ReconnectCount": cfg.reconnect_count,
            "ReconnectInterval": cfg.reconnect_interval,
            "ReconnectNonce": cfg.reconnect_nonce,
            "PingInterval": cfg.ping_interval,
        }
        self.reset_state()

    def reset_state(self):
        self.calls = []
        self.acks = []
        self.protocol_errors = []
        self.events = {}  # event_id -> record
        self.frame_index = {}  # frame message_id -> event_id
        self.pending = []  # event ids waiting for a live connection
        self.messages = []
        self.reactions = {}
        self.ratelimits = {}  # "send" | "patch" -> armed limit
        self.patch_qps = None  # per-message PATCH limit enforced, or None
        self.slow = {}  # path or prefix* -> seconds
        self.endpoint_fail = None
        self.webhooks = []
        # The message store history is served from: message_id -> record (see store_message).
        self.store = {}
        self.chats = {}  # chat_id -> "p2p" | "group"
        self.thread_roots = {}  # thread_id -> root message_id
        self.page_tokens = {}  # message/list page_token -> {"query", "after"}
        self.last_stamp = 0
        self.history_scope = not self.cfg.no_history_scope
        self.uploads = {}  # file_key / image_key -> what the bot uploaded
        self.resources = {}  # (message_id, key) -> {"kind", "name", "data", "stream_bytes"}
        self.received_keys = set()  # resource keys users sent (not the bot's to send)
        self.downloads = []
        self.updates = []  # every PATCH of a message, accepted or not

    def next_id(self, prefix, n=32):
        self.counter += 1
        return f"{prefix}{self.counter:06d}{secrets.token_hex(n // 2)[: n - 6]}"

    async def notify(self):
        async with self.changed:
            self.changed.notify_all()

    # ---- events ----------------------------------------------------------------------------------

    def event_body(self, body, token=None):
        """An im.message.receive_v1 event (schema 2.0), from the docs' example:
        https://open.feishu.cn/document/uAjLw4CM/ukTMukTMukTM/reference/im-v1/message/events/receive
        A "file" in the push makes it a file or image message whose content is the documented
        {"file_key", "file_name"} / {"image_key"}
        (https://open.feishu.cn/document/server-docs/im-v1/message-content-description/message_content);
        its bytes are then served by the message-resource API. A "thread_id" puts the message in
        that thread (its root_id/parent_id default to the thread's root).
        """
        kind = body.get("kind") or "p2p"
        text = body.get("text") if body.get("text") is not None else "hello"
        user = body.get("user") or DEFAULT_USER
        event_id = body.get("event_id") or self.next_id("")
        message_id = body.get("message_id") or self.next_id("om_")
        mentions = None
        if kind == "card_action":
            return self.card_action_body(body, user, event_id, token)
        if kind not in ("p2p", "group_mention", "post"):
            raise ValueError(f"unknown kind {kind!r}")
        chat_type = "group" if kind == "group_mention" else "p2p"
        if chat_type == "group":
            chat_id = body.get("chat_id") or "oc_5ce6d572455d361153b7xx51da133945"
        else:
            chat_id = body.get("chat_id") or self.p2p_chat_id(user)
        file = parse_file_spec(body["file"]) if body.get("file") is not None else None
        if file:
            # A file or image message has no text, so no @-mention either.
            message_type = file["kind"]
            key = self.next_id("file_v3_" if file["kind"] == "file" else "img_v3_")
            content = {"file_key": key, "file_name": file["name"]} if file["kind"] == "file" \
                else {"image_key": key}
            self.resources[(message_id, key)] = file
            self.received_keys.add(key)
        elif kind == "group_mention":
            message_type = "text"
            # The docs' example: "content": "{\"text\":\"@_user_1 hello\"}" with mentions[0]
            # key "@_user_1" naming the mentioned user (here the bot).
            content = {"text": text if text.startswith("@_user_1") else f"@_user_1 {text}"}
            mentions = [{
                "key": "@_user_1",
                "id": {"union_id": "on_bot" + self.cfg.bot_open_id[6:], "user_id": "",
                       "open_id": self.cfg.bot_open_id},
                "name": self.cfg.bot_name,
                "tenant_key": self.cfg.tenant_key,
            }]
        elif kind == "post":
            # Rich text, https://open.feishu.cn/document/server-docs/im-v1/message-content-description/message_content
            # (the receive event carries post content as {"title", "content": [[elements]]}).
            message_type = "post"
            content = {"title": body.get("title", ""),
                       "content": [[{"tag": "text", "text": text, "style": []}],
                                   [{"tag": "a", "href": "https://example.com", "text": "link", "style": []}]]}
        else:
            message_type = "text"
            content = {"text": text}
        thread_id = body.get("thread_id") or ""
        root_id, parent_id = self.thread_links(thread_id, body.get("root_id", ""), body.get("parent_id", ""))
        stamp = self.stamp()
        message = {
            "message_id": message_id,
            "root_id": root_id,
            "parent_id": parent_id,
            "create_time": stamp,
            "update_time": stamp,
            "chat_id": chat_id,
            "chat_type": chat_type,
            "message_type": message_type,
            "content": compact_json(content),
            "user_agent": "Mozilla/5.0 fake-feishu",
        }
        if thread_id:
            message["thread_id"] = thread_id
        if mentions:
            message["mentions"] = mentions
        return {
            "schema": "2.0",
            "header": {
                "event_id": event_id,
                "event_type": "im.message.receive_v1",
                "create_time": ms(),
                "token": self.cfg.verification_token if token is None else token,
                "app_id": self.cfg.app_id,
                "tenant_key": self.cfg.tenant_key,
            },
            "event": {
                "sender": {
                    "sender_id": {"union_id": "on_" + user[3:], "user_id": "u" + user[3:11], "open_id": user},
                    "sender_type": "user",
                    "tenant_key": self.cfg.tenant_key,
                },
                "message": message,
            },
        }

    def card_action_body(self, body, user, event_id, token):
        """A card.action.trigger callback (schema 2.0), from the docs' example:
        https://open.feishu.cn/document/feishu-cards/card-callback-communication
        (operator, the callback token, the button's action with its value, the message's
        context)."""
        message_id = body.get("message_id") or self.next_id("om_")
        chat_id = body.get("chat_id") or self.p2p_chat_id(user)
        return {
            "schema": "2.0",
            "header": {
                "event_id": event_id,
                "token": self.cfg.verification_token if token is None else token,
                "create_time": ms(),
                "event_type": "card.action.trigger",
                "tenant_key": self.cfg.tenant_key,
                "app_id": self.cfg.app_id,
            },
            "event": {
                "operator": {"tenant_key": self.cfg.tenant_key, "user_id": "u" + user[3:11],
                             "open_id": user, "union_id": "on_" + user[3:]},
                "token": "c-" + secrets.token_hex(20),
                "action": {"value": body.get("value") or {}, "tag": "button"},
                "host": "im_message",
                "context": {"open_message_id": message_id, "open_chat_id": chat_id},
            },
        }

    @staticmethod
    def card_answer(data):
        """A card callback's answer read by lark-oapi's P2CardActionTriggerResponse: (answer
        dict, whether it carries a toast of a documented type)."""
        try:
            answer = json.loads(data) if isinstance(data, (str, bytes)) else data
            parsed = JSON.unmarshal(json.dumps(answer), P2CardActionTriggerResponse)
            ok = parsed.toast is not None and parsed.toast.type in ("info", "success", "error", "warning") \
                and bool(parsed.toast.content)
            return answer, ok
        except (ValueError, TypeError, AttributeError):
            return None, False

    # ---- message store ---------------------------------------------------------------------------

    def stamp(self) -> str:
        """A create_time (ms string) later than every one handed out before, so stored messages
        keep their order even within one millisecond."""
        self.last_stamp = max(int(now() * 1000), self.last_stamp + 1)
        return str(self.last_stamp)

    @staticmethod
    def p2p_chat_id(open_id):
        """The one p2p chat between the bot and a user (pushes and sends to the open_id share it)."""
        return "oc_p2p_" + open_id[3:19]

    def chat_type_of(self, chat_id):
        return self.chats.get(chat_id) or ("p2p" if chat_id.startswith("oc_p2p_") else "group")

    def app_sender(self):
        # message/create's response: a message the app sent has sender id = app_id, id_type
        # "app_id", sender_type "app".
        return {"id": self.cfg.app_id, "id_type": "app_id", "sender_type": "app",
                "tenant_key": self.cfg.tenant_key}

    def user_sender(self, open_id):
        if open_id == self.cfg.bot_open_id:
            return self.app_sender()
        return {"id": open_id, "id_type": "open_id", "sender_type": "user", "tenant_key": self.cfg.tenant_key}

    def thread_links(self, thread_id, root_id, parent_id):
        """(root_id, parent_id) of a message in `thread_id`: given ones win, else the thread's
        root (a reply in a thread has the root as parent, message/intro)."""
        if thread_id and not root_id:
            root = self.thread_roots.get(thread_id)
            if root:
                return root, parent_id or root
        return root_id, parent_id or root_id

    def store_message(self, chat_id, msg_type, content, sender, message_id=None, root_id="",
                      parent_id="", thread_id="", chat_type=None, mentions=None, create_time=None):
        """Keeps a message as message/list serves it. A thread message without a root starts
        the thread; a message whose root starts a thread marks the root as in it."""
        message_id = message_id or self.next_id("om_")
        root_id, parent_id = self.thread_links(thread_id, root_id or "", parent_id or "")
        if thread_id:
            root = root_id or message_id
            self.thread_roots.setdefault(thread_id, root)
            root_record = self.store.get(root)
            if root_record is not None and not root_record["thread_id"]:
                root_record["thread_id"] = thread_id
        self.chats[chat_id] = chat_type or self.chat_type_of(chat_id)
        stamp = str(create_time) if create_time is not None else self.stamp()
        record = {"message_id": message_id, "root_id": root_id, "parent_id": parent_id,
                  "thread_id": thread_id, "msg_type": msg_type, "content": content,
                  "create_time": stamp, "update_time": stamp, "deleted": False, "updated": False,
                  "chat_id": chat_id, "chat_type": self.chats[chat_id], "sender": sender,
                  "mentions": mentions or []}
        self.store[message_id] = record
        return record

    @staticmethod
    def message_view(record, listed=False):
        """A stored message as the Open API shows it: the Message of message/create's response
        (every field, empty ones ""), or with `listed` an item of message/list, which leaves out
        root_id/parent_id/thread_id/mentions a message does not have (lark_oapi's Message model)."""
        view = {k: record[k] for k in ("message_id", "root_id", "parent_id", "thread_id", "msg_type",
                                       "create_time", "update_time", "deleted", "updated", "chat_id")}
        view["sender"] = dict(record["sender"])
        view["body"] = {"content": record["content"]}
        view["mentions"] = list(record["mentions"])
        if listed:
            return {k: v for k, v in view.items() if v != "" and v != []}
        view["upper_message_id"] = ""
        return view

    def record_received(self, event):
        """Stores the message of an im.message.receive_v1 event (pushed or webhook-sent) once."""
        message = event["event"]["message"]
        if message["message_id"] in self.store:
            return
        mentions = [{"key": m["key"], "id": m["id"]["open_id"], "id_type": "open_id", "name": m["name"],
                     "tenant_key": m["tenant_key"]} for m in message.get("mentions") or []]
        self.store_message(message["chat_id"], message["message_type"], message["content"],
                           self.user_sender(event["event"]["sender"]["sender_id"]["open_id"]),
                           message_id=message["message_id"], root_id=message["root_id"],
                           parent_id=message["parent_id"], thread_id=message.get("thread_id", ""),
                           chat_type=message["chat_type"], mentions=mentions,
                           create_time=message["create_time"])

    def attach_upload(self, record):
        """A file/image message the bot sent: its upload learns which message carried it, and the
        resource becomes downloadable through that message."""
        field, _ = RESOURCE_FIELDS.get(record["msg_type"], (None, None))
        upload = self.uploads.get(json.loads(record["content"]).get(field)) if field else None
        if upload is None:
            return
        upload["messages"].append({"message_id": record["message_id"], "chat_id": record["chat_id"],
                                   "root_id": record["root_id"], "thread_id": record["thread_id"]})
        self.resources[(record["message_id"], upload["key"])] = {
            "kind": upload["kind"], "name": upload["name"], "data": upload["data"], "stream_bytes": None}

    # ---- Open API --------------------------------------------------------------------------------

    def record(self, request, body, raw, status, answer, headers=None):
        call = {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "headers": dict(request.headers),
            "body": body,
            "raw": raw.decode("utf-8", "replace"),
            "status": status,
            "answer": answer,
            "answer_headers": headers or {},
            "at": now(),
        }
        self.calls.append(call)
        return call

    def delay_for(self, path):
        for pattern, seconds in self.slow.items():
            if path == pattern or (pattern.endswith("*") and path.startswith(pattern[:-1])):
                return seconds
        return 0

    async def api(self, request: web.Request):
        delay = self.delay_for(request.path)
        if delay:
            await asyncio.sleep(delay)
        if request.method == "POST" and request.path in UPLOAD_KINDS:
            return await self.upload(request, UPLOAD_KINDS[request.path])
        resource = RESOURCE_PATH.match(request.path)
        if resource and request.method == "GET":
            return await self.download(request, *resource.groups())
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        return await self.respond(request, body, raw, self.dispatch(request, body))

    async def respond(self, request, body, raw, result):
        """Records an Open API call and answers it with JSON; `result` is (status, answer, headers)."""
        status, answer, headers = result
        self.record(request, body, raw, status, answer, headers)
        await self.notify()
        return web.json_response(answer, status=status, headers=headers or None)

    def dispatch(self, request, body):
        path = request.path
        if body is None:
            return 400, {"code": CODE_BAD_PARAM, "msg": "body is not JSON"}, None
        if path == "/open-apis/auth/v3/tenant_access_token/internal" and request.method == "POST":
            return self.tenant_token(body)
        if path == GEN_ENDPOINT_URI and request.method == "POST":
            return self.ws_endpoint(body)
        auth = self.check_token(request)
        if auth is not None:
            return auth
        parts = path.split("/")
        if path == "/open-apis/bot/v3/info" and request.method == "GET":
            # https://open.feishu.cn/document/client-docs/bot-v3/obtain-bot-info
            return 200, {"code": 0, "msg": "ok", "bot": {
                "activate_status": self.cfg.bot_activate_status, "app_name": self.cfg.bot_name,
                "avatar_url": "https://example.com/avatar.png", "ip_white_list": [],
                "open_id": self.cfg.bot_open_id}}, None
        if path == "/open-apis/im/v1/messages" and request.method == "POST":
            return self.limited("send") or self.create_message(request, body)
        if path == "/open-apis/im/v1/messages" and request.method == "GET":
            return self.list_messages(request.query)
        if path == "/open-apis/ephemeral/v1/send" and request.method == "POST":
            return self.send_ephemeral(body)
        if len(parts) == 6 and parts[:5] == ["", "open-apis", "im", "v1", "messages"] \
                and request.method == "PATCH":
            return self.patch_card(parts[5], body)
        if len(parts) == 7 and parts[:5] == ["", "open-apis", "im", "v1", "messages"]:
            if parts[6] == "reply" and request.method == "POST":
                return self.limited("send") or self.reply_message(parts[5], body)
            if parts[6] == "reactions" and request.method == "POST":
                return self.add_reaction(parts[5], body)
        if len(parts) == 8 and parts[:5] == ["", "open-apis", "im", "v1", "messages"] \
                and parts[6] == "reactions" and request.method == "DELETE":
            return self.delete_reaction(parts[5], parts[7])
        return 404, {"code": 404, "msg": "404 page not found"}, None

    def tenant_token(self, body):
        # https://open.feishu.cn/document/server-docs/authentication-management/access-token/tenant_access_token_internal
        if not body.get("app_id") or not body.get("app_secret"):
            return 400, {"code": CODE_BAD_PARAM, "msg": "invalid param"}, None
        if body.get("app_id") != self.cfg.app_id or body.get("app_secret") != self.cfg.app_secret:
            return 400, {"code": CODE_BAD_SECRET, "msg": "app secret invalid"}, None
        token = "t-" + secrets.token_hex(20)
        self.tokens[token] = now() + self.cfg.token_ttl
        return 200, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": self.cfg.token_ttl}, None

    def check_token(self, request):
        # Gateway answers for a missing / invalid tenant_access_token (HTTP 400, as the gateway
        # answers the other 9999xxxx codes; the docs list the codes, not the status).
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or not auth[7:].strip():
            return 400, {"code": CODE_MISSING_TOKEN,
                         "msg": "Missing access token for authorization. Please make a request with token attached."}, None
        token = auth[7:].strip()
        expires = self.tokens.get(token)
        if expires is None or expires <= now():
            return 400, {"code": CODE_INVALID_TOKEN,
                         "msg": "Invalid access token for authorization. Please make a request with token attached."}, None
        return None

    def limited(self, target):
        """An armed rate limit's answer for the next call of `target` ("send": create/reply,
        "patch": card updates), or None. Gateway code 99991400 comes as the frequency-control doc
        shows it (HTTP 429 with x-ogw-ratelimit-* headers); a per-message 230020 as HTTP 400."""
        rl = self.ratelimits.get(target)
        if not rl or rl["count"] <= 0:
            return None
        rl["count"] -= 1
        headers = None
        if rl["code"] == CODE_RATE_LIMIT:
            headers = {"x-ogw-ratelimit-limit": str(rl["limit"]), "x-ogw-ratelimit-reset": str(rl["reset"])}
        return rl["status"], {"code": rl["code"], "msg": RATE_LIMIT_MSGS.get(rl["code"], "rate limited")}, headers

    def check_content(self, body):
        """Why Feishu would refuse a message's msg_type/content, or None: content must be JSON, a
        card must be a valid card JSON 2.0, and a file/image must name a key this bot uploaded as
        that kind (an unknown key: 230001 "invalid file_key" / "invalid image_key"; a key a user
        sent: 230017)."""
        msg_type, content = body.get("msg_type"), body.get("content")
        if not msg_type or not isinstance(content, str):
            return 400, {"code": 99992402, "msg": "field validation failed"}, None
        try:
            parsed = json.loads(content)
        except ValueError:
            return invalid_param("invalid message content")
        if msg_type == "interactive":
            why = card_problem(parsed)
            if why:
                return card_error(why)
        if msg_type in RESOURCE_FIELDS:
            field, kind = RESOURCE_FIELDS[msg_type]
            key = parsed.get(field) if isinstance(parsed, dict) else None
            upload = self.uploads.get(key)
            if upload is not None and upload["kind"] == kind:
                return None
            if key in self.received_keys:
                return 400, {"code": CODE_NOT_OWNER, "msg": "Bot is NOT the owner of the resource."}, None
            return invalid_param(f"invalid {field}")
        return None

    def patch_card(self, message_id, body):
        # https://open.feishu.cn/document/server-docs/im-v1/message-card/patch: replaces the
        # content of a card the app sent ("update_multi" cards for every reader). "单条消息更新
        # 频控为 5 QPS" — over it Feishu answers 230020; the fake enforces that only when asked
        # (/_test/ratelimit target patch, per_message_qps). Every attempt lands in self.updates.
        t = now()
        answer = self.limited("patch") or self.patch_throttled(message_id, t) or self.apply_patch(message_id, body)
        previous = next((u for u in reversed(self.updates) if u["message_id"] == message_id), None)
        self.updates.append({"message_id": message_id, "at": t,
                             "interval": None if previous is None else round(t - previous["at"], 4),
                             "ok": answer[1].get("code") == 0, "code": answer[1].get("code"),
                             "content": body.get("content")})
        return answer

    def patch_throttled(self, message_id, t):
        if not self.patch_qps:
            return None
        recent = [u for u in self.updates if u["message_id"] == message_id and u["ok"] and t - u["at"] < 1.0]
        if len(recent) < self.patch_qps:
            return None
        return 400, {"code": CODE_MESSAGE_RATE_LIMIT, "msg": RATE_LIMIT_MSGS[CODE_MESSAGE_RATE_LIMIT]}, None

    def apply_patch(self, message_id, body):
        record = self.store.get(message_id)
        if record is None or record["msg_type"] != "interactive" or record["sender"]["sender_type"] != "app":
            return invalid_param("This message is NOT a card")  # the 230001 FAQ's wording
        content = body.get("content")
        bad = self.check_content({"msg_type": "interactive", "content": content})
        if bad:
            return bad
        record["content"] = content
        record["updated"] = True
        record["update_time"] = self.stamp()
        self.messages.append({"kind": "patch", "message_id": message_id, "msg_type": "interactive",
                              "content": content, "at": now()})
        return 200, {"code": 0, "msg": "success", "data": {}}, None

    def send_ephemeral(self, body):
        # https://open.feishu.cn/document/server-docs/im-v1/message-card/send-message-cards-that-are-only-visible-to-certain-people
        if not body.get("chat_id") or not body.get("open_id") or body.get("msg_type") != "interactive":
            return 400, {"code": 99992402, "msg": "field validation failed"}, None
        why = card_problem(body.get("card"))
        if why:
            return card_error(why)
        message_id = self.next_id("om_")
        self.messages.append({"kind": "ephemeral", "message_id": message_id, "chat_id": body["chat_id"],
                              "open_id": body["open_id"], "msg_type": "interactive",
                              "content": json.dumps(body["card"], ensure_ascii=False), "at": now()})
        return 200, {"code": 0, "msg": "ok", "data": {"message_id": message_id}}, None

    def create_message(self, request, body):
        # https://open.feishu.cn/document/server-docs/im-v1/message/create. To a user (open_id,
        # ...) the message lands in the bot's p2p chat with them, whose chat_id the answer
        # carries; an open_id shares that chat with the user's pushes.
        rtype = request.query.get("receive_id_type")
        if rtype not in RECEIVE_ID_TYPES or not body.get("receive_id"):
            return 400, {"code": 99992402, "msg": "field validation failed"}, None
        bad = self.check_content(body)
        if bad:
            return bad
        receive_id = body["receive_id"]
        if rtype == "chat_id":
            chat_id, chat_type = receive_id, None
        elif rtype == "open_id":
            chat_id, chat_type = self.p2p_chat_id(receive_id), "p2p"
        else:
            chat_id, chat_type = "oc_p2p_" + receive_id[-16:], "p2p"
        record = self.store_message(chat_id, body["msg_type"], body["content"], self.app_sender(),
                                    chat_type=chat_type)
        self.attach_upload(record)
        self.messages.append({"kind": "create", "message_id": record["message_id"], "receive_id_type": rtype,
                              "receive_id": receive_id, "chat_id": chat_id, "msg_type": body["msg_type"],
                              "content": body["content"], "uuid": body.get("uuid"), "at": now()})
        return 200, {"code": 0, "msg": "success", "data": self.message_view(record)}, None

    def reply_message(self, parent, body):
        # https://open.feishu.cn/document/server-docs/im-v1/message/reply: the reply joins the
        # parent's chat; root_id is the parent's root (or the parent). reply_in_thread starts a
        # thread at that root (or joins the one the parent is in); a reply to a message in a
        # thread stays in it.
        bad = self.check_content(body)
        if bad:
            return bad
        in_thread = bool(body.get("reply_in_thread"))
        parent_record = self.store.get(parent)
        chat_id = parent_record["chat_id"] if parent_record else "oc_fake_chat"
        root = (parent_record["root_id"] or parent) if parent_record else parent
        thread_id = parent_record["thread_id"] if parent_record else ""
        if in_thread and not thread_id:
            thread_id = "omt_" + root[3:15]
        record = self.store_message(chat_id, body["msg_type"], body["content"], self.app_sender(),
                                    root_id=root, parent_id=parent, thread_id=thread_id)
        self.attach_upload(record)
        self.messages.append({"kind": "reply", "message_id": record["message_id"], "parent_id": parent,
                              "root_id": root, "thread_id": thread_id, "chat_id": chat_id,
                              "msg_type": body["msg_type"], "content": body["content"],
                              "reply_in_thread": in_thread, "uuid": body.get("uuid"), "at": now()})
        return 200, {"code": 0, "msg": "success", "data": self.message_view(record)}, None

    def list_messages(self, query):
        """https://open.feishu.cn/document/server-docs/im-v1/message/list: a chat's messages (a
        thread shows only by its root) or a thread's (root and replies), by create time, paged by
        an opaque page_token bound to the query it came from. Group chats and threads need the
        "获取群组中所有消息" scope (--no-history-scope: 230027); p2p history needs none."""
        container_type, container_id = query.get("container_id_type"), query.get("container_id", "")
        if container_type not in ("chat", "thread"):
            return invalid_param("invalid container_id_type")
        if not container_id.startswith("oc_" if container_type == "chat" else "omt_"):
            return invalid_param("invalid container_id")
        sort = query.get("sort_type") or LIST_SORTS[0]
        if sort not in LIST_SORTS:
            return invalid_param("invalid sort_type")
        try:
            page_size = int(query.get("page_size") or LIST_PAGE_SIZE)
        except ValueError:
            page_size = 0
        if not 1 <= page_size <= LIST_MAX_PAGE_SIZE:
            return invalid_param("The page_size exceeds the limit")
        start = end = None
        if container_type == "chat":  # a thread container ignores the time range
            for name in ("start_time", "end_time"):
                value = query.get(name) or None
                if value is not None and not value.isdigit():
                    return invalid_param(f"invalid {name}")
            start, end = (int(query[n]) if query.get(n) else None for n in ("start_time", "end_time"))
            if start is not None and end is not None and end < start:
                return invalid_param("The end_time is earlier than the start_time")
        if not self.history_scope and (container_type == "thread" or self.chat_type_of(container_id) != "p2p"):
            return 400, {"code": CODE_NO_PERMISSION, "msg": "Lack of necessary permissions."}, None
        bound = (container_type, container_id, sort, start, end)
        after = None
        token = query.get("page_token")
        if token:
            state = self.page_tokens.get(token)
            if state is None:
                return invalid_param("invalid page_token")
            if state["query"] != bound:
                return invalid_param("the request parameters have changed, page_token is invalid")
            after = state["after"]

        def wanted(r):
            if container_type == "thread":
                return r["thread_id"] == container_id
            seconds = int(r["create_time"]) // 1000
            return r["chat_id"] == container_id and not (r["thread_id"] and r["root_id"]) \
                and (start is None or seconds >= start) and (end is None or seconds <= end)

        order = list(self.store.values())  # insertion order breaks create_time ties
        keyed = sorted(((int(r["create_time"]), i), r) for i, r in enumerate(order) if wanted(r))
        if sort == "ByCreateTimeDesc":
            keyed.reverse()
        if after is not None:
            keyed = [(k, r) for k, r in keyed if (k > after if sort == LIST_SORTS[0] else k < after)]
        page = keyed[:page_size]
        data = {"has_more": len(keyed) > page_size, "items": [self.message_view(r, listed=True) for _, r in page]}
        if data["has_more"]:
            token = base64.urlsafe_b64encode(secrets.token_bytes(64)).decode("ascii")  # the docs' token form
            self.page_tokens[token] = {"query": bound, "after": page[-1][0]}
            data["page_token"] = token
        return 200, {"code": 0, "msg": "success", "data": data}, None

    def reaction_data(self, reaction_id, emoji):
        # https://open.feishu.cn/document/server-docs/im-v1/message-reaction/create
        return {"reaction_id": reaction_id,
                "operator": {"operator_id": self.cfg.app_id, "operator_type": "app"},
                "action_time": ms(), "reaction_type": {"emoji_type": emoji}}

    def add_reaction(self, message_id, body):
        emoji = (body.get("reaction_type") or {}).get("emoji_type")
        if not emoji:
            return 400, {"code": 99992402, "msg": "field validation failed"}, None
        reaction_id = self.next_id("ZCaCIjUBVVWSrm5L-3ZTw", 24)
        self.reactions[reaction_id] = {"reaction_id": reaction_id, "message_id": message_id,
                                       "emoji_type": emoji, "at": now(), "deleted": False}
        return 200, {"code": 0, "msg": "success", "data": self.reaction_data(reaction_id, emoji)}, None

    def delete_reaction(self, message_id, reaction_id):
        # https://open.feishu.cn/document/server-docs/im-v1/message-reaction/delete
        r = self.reactions.get(reaction_id)
        if r is None or r["deleted"] or r["message_id"] != message_id:
            # approximate: the fake's code for "no such reaction"
            return 400, {"code": 231003, "msg": "The reaction does not exist."}, None
        r["deleted"] = True
        r["deleted_at"] = now()
        return 200, {"code": 0, "msg": "success", "data": self.reaction_data(reaction_id, r["emoji_type"])}, None

    async def read_form(self, request):
        """A multipart/form-data body -> {name: {"filename", "content_type", "data"}} (None when
        the body is not multipart). lark-oapi's MultipartEncoder sends the file part without a
        filename, so a part is not told apart by one."""
        if not request.content_type.startswith("multipart/"):
            return None
        form = {}
        reader = await request.multipart()
        while True:
            part = await reader.next()
            if part is None:
                return form
            form[part.name] = {"filename": part.filename, "content_type": part.headers.get("Content-Type"),
                               "data": bytes(await part.read())}

    @staticmethod
    def form_text(form, name):
        field = form.get(name)
        return None if field is None else field["data"].decode("utf-8", "replace")

    async def upload(self, request, kind):
        """POST /open-apis/im/v1/files (kind file) or /open-apis/im/v1/images (kind image): keeps
        the bytes under a fresh file_v3_/img_v3_ key for messages and /_test/files."""
        refused = self.check_token(request)
        form = None if refused else await self.read_form(request)
        summary = None if form is None else {
            name: (self.form_text(form, name) if name != kind else
                   {"filename": f["filename"], "content_type": f["content_type"], "length": len(f["data"])})
            for name, f in form.items()}
        return await self.respond(request, summary, b"", refused or self.accept_upload(kind, form))

    def accept_upload(self, kind, form):
        if form is None or kind not in form:
            return resource_error(CODE_RES_BAD_PARAM, "Invalid request param.")
        data = form[kind]["data"]
        type_field = "file_type" if kind == "file" else "image_type"
        declared = self.form_text(form, type_field)
        name = self.form_text(form, "file_name") if kind == "file" else form[kind]["filename"]
        duration = self.form_text(form, "duration") or None  # lark-oapi sends an unset one empty
        if declared not in (FILE_TYPES if kind == "file" else IMAGE_TYPES) or (kind == "file" and not name) \
                or (duration is not None and not duration.isdigit()):
            return resource_error(CODE_RES_BAD_PARAM, "Invalid request param.")
        if not data:
            return resource_error(CODE_RES_EMPTY, "File's size can't be 0.")
        if len(data) > MAX_UPLOAD_BYTES[kind]:
            return resource_error(CODE_RES_TOO_BIG, "The file size exceed the max value.")
        if kind == "image" and image_mime(data) is None:
            return resource_error(CODE_RES_BAD_IMAGE, "Can't regonnize the image format.")
        key = self.next_id("file_v3_" if kind == "file" else "img_v3_")
        self.uploads[key] = {
            "key": key, "kind": kind, "name": name, type_field: declared,
            "duration": int(duration) if duration is not None else None,
            "content_type": form[kind]["content_type"], "length": len(data),
            "content_b64": base64.b64encode(data).decode("ascii"), "sha256": hashlib.sha256(data).hexdigest(),
            "data": data, "messages": [], "at": now()}
        # Response bodies as the two pages show them.
        if kind == "file":
            return 200, {"code": 0, "msg": "success", "data": {"file_key": key}}, None
        return 200, {"code": 0, "data": {"image_key": key}, "msg": "success"}, None

    async def download(self, request, message_id, key):
        """GET /open-apis/im/v1/messages/{message_id}/resources/{key}?type=file|image: the bytes
        (or stream_bytes zeros, written in 64 KiB chunks) with Content-Type and a
        Content-Disposition naming the file; each download is recorded with the bytes written and
        whether the client hung up before the end."""
        kind = request.query.get("type")
        resource = self.resources.get((message_id, key))
        refused = self.check_token(request)
        if refused is None and kind not in ("file", "image"):
            refused = resource_error(CODE_RES_BAD_PARAM, "Invalid request param.")
        if refused is None and resource is None:
            refused = resource_error(CODE_RES_NOT_IN_MESSAGE, "File not in msg.")
        if refused is None and resource["kind"] != kind:
            refused = resource_error(CODE_RES_BAD_PARAM, "Invalid request param.")
        entry = {"path": request.path, "message_id": message_id, "file_key": key, "type": kind,
                 "status": refused[0] if refused else 200, "code": refused[1]["code"] if refused else 0,
                 "length": None, "bytes_sent": 0, "hung_up": False, "at": now(), "finished_at": None}
        self.downloads.append(entry)
        if refused:
            entry["finished_at"] = now()
            return await self.respond(request, None, b"", refused)
        data = resource["data"]
        entry["length"] = len(data) if data is not None else resource["stream_bytes"]
        name = resource["name"] or key
        mime = (image_mime(data or b"") if kind == "image" else mimetypes.guess_type(name)[0]) \
            or "application/octet-stream"
        # Not shown in the docs: an attachment disposition, the name also RFC 5987-encoded (what
        # lark_oapi's Files.parse_file_name reads first).
        plain = name if name.isascii() and '"' not in name else quote(name)
        disposition = f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name)}"
        response = web.StreamResponse(status=200, headers={
            "Content-Type": mime, "Content-Disposition": disposition, "Content-Length": str(entry["length"])})
        try:
            await response.prepare(request)
            if data is not None:
                chunks = (data[i:i + STREAM_CHUNK] for i in range(0, len(data), STREAM_CHUNK))
            else:
                zeros = bytes(STREAM_CHUNK)
                chunks = (zeros[:min(STREAM_CHUNK, entry["length"] - i)] for i in range(0, entry["length"], STREAM_CHUNK))
            for chunk in chunks:
                await response.write(chunk)
                entry["bytes_sent"] += len(chunk)
            await response.write_eof()
        except ConnectionError:  # aiohttp's ClientConnectionResetError: the client went away
            entry["hung_up"] = True
        finally:
            entry["finished_at"] = now()
            self.record(request, None, b"", 200, {"bytes_sent": entry["bytes_sent"], "hung_up": entry["hung_up"]},
                        {k: v for k, v in response.headers.items()})
            await self.notify()
        return response

    def ws_endpoint(self, body):
        # lark_oapi/ws/client.py _get_conn_url: POST domain + GEN_ENDPOINT_URI with
        # {"AppID", "AppSecret"}; answer unmarshalled as EndpointResp{code, msg, data{URL,
        # ClientConfig}} (lark_oapi/ws/model.py); URL's query must carry device_id and
        # service_id (the ping frame's `service` is int(service_id)).
        fail = self.endpoint_fail
        if fail and fail["count"] > 0:
            # lark_oapi/ws/const.py SYSTEM_BUSY = 1, INTERNAL_ERROR = 1000040343: the client
            # raises ServerException and retries after ReconnectInterval.
            fail["count"] -= 1
            return 200, {"code": fail["code"], "msg": fail["msg"]}, None
        if body.get("AppID") != self.cfg.app_id or body.get("AppSecret") != self.cfg.app_secret:
            # approximate: the SDK raises ClientException for any code but 0/1/1000040343
            return 200, {"code": WS_AUTH_FAILED, "msg": "auth failed: invalid app_id or app_secret"}, None
        ticket = str(uuid.uuid4())
        device_id = str(7_000_000_000_000_000_000 + secrets.randbelow(10 ** 18))
        service_id = str(10_000 + secrets.randbelow(90_000))
        self.tickets[ticket] = (device_id, service_id)
        url = f"ws://{self.host}:{self.port}/ws?device_id={device_id}&service_id={service_id}&ticket={ticket}"
        return 200, {"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": dict(self.client_config)}}, None

    # ---- long connection -------------------------------------------------------------------------

    def open_conns(self):
        return [c for c in self.conns.values() if c.open]

    def pick(self, body):
        cid = body.get("connection")
        if cid:
            conn = self.conns.get(cid)
            return conn if conn and conn.open else None
        live = self.open_conns()
        return live[-1] if live else None

    async def send(self, conn, frame, what):
        async with conn.lock:
            try:
                await conn.ws.send_bytes(frame.SerializeToString())
            except (ConnectionError, RuntimeError):
                return False
        conn.frames_sent.append({"what": what, "at": now()})
        return True

    async def send_pong(self, conn, config=None):
        cfg = config or self.client_config
        frame = new_frame(FRAME_CONTROL, int(conn.service_id), [(HEADER_TYPE, "pong")],
                          json.dumps(cfg).encode("utf-8"))
        ok = await self.send(conn, frame, "pong")
        if ok:
            conn.pongs.append({"at": now(), "config": dict(cfg)})
        return ok

    async def ws(self, request: web.Request):
        ticket = request.query.get("ticket")
        if ticket not in self.tickets:
            # lark_oapi/ws/client.py _parse_ws_conn_exception reads these headers off a failed
            # handshake (403 -> ClientException, no reconnect).
            return web.Response(status=403, headers={HEADER_HANDSHAKE_STATUS: str(WS_FORBIDDEN),
                                                     HEADER_HANDSHAKE_MSG: "invalid ticket"})
        device_id, service_id = self.tickets.pop(ticket)
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        self.conn_counter += 1
        conn = Conn(f"conn{self.conn_counter}", ws, request, device_id, service_id)
        self.conns[conn.id] = conn
        await self.notify()
        asyncio.get_running_loop().create_task(self.flush_pending())
        try:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    conn.frames_received += 1
                    await self.on_frame(conn, msg.data)
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    self.protocol_error(conn, msg.data, "text frame (the protocol is binary protobuf)")
                elif msg.type == aiohttp.WSMsgType.ERROR:
                    break
        finally:
            if conn.closed_at is None:
                conn.closed_at = now()
                conn.close_code = ws.close_code
                conn.closed_by = conn.closed_by or "client"
            await self.on_closed(conn)
        return ws

    def protocol_error(self, conn, raw, reason):
        self.protocol_errors.append({"connection": conn.id, "reason": reason,
                                     "raw": raw if isinstance(raw, str) else base64.b64encode(raw).decode(),
                                     "at": now()})

    async def on_frame(self, conn, data):
        frame = Frame()
        try:
            frame.ParseFromString(data)
        except Exception as e:  # noqa: BLE001 - protobuf raises DecodeError subclasses
            self.protocol_error(conn, data, f"not a pbbp2.Frame: {e}")
            await self.notify()
            return
        hs = frame_headers(frame)
        kind = hs.get(HEADER_TYPE)
        if frame.method == FRAME_CONTROL and kind == "ping":
            # lark_oapi/ws/client.py _new_ping_frame: method CONTROL, headers type=ping,
            # service=int(service_id), SeqID=LogID=0; sent every PingInterval seconds.
            t = now()
            prev = conn.pings[-1]["at"] if conn.pings else None
            conn.pings.append({"at": t, "interval": None if prev is None else round(t - prev, 3),
                               "service": frame.service, "answered": not conn.deaf})
            if not conn.deaf:
                await self.send_pong(conn)
        elif frame.method == FRAME_DATA and kind == "event":
            await self.on_ack(conn, frame, hs)
        else:
            self.protocol_error(conn, data, f"unexpected frame method={frame.method} type={kind}")
        await self.notify()

    async def on_ack(self, conn, frame, hs):
        # lark_oapi/ws/client.py _handle_data_frame: the client sends the received frame back
        # with a biz_rt header (handler ms) and payload = JSON of Response{code: 200 | 500,
        # data: base64 of the handler's result}.
        fid = hs.get(HEADER_MESSAGE_ID)
        event_id = self.frame_index.get(fid)
        try:
            payload = json.loads(frame.payload.decode("utf-8")) if frame.payload else None
        except ValueError:
            payload = None
        code = payload.get("code") if isinstance(payload, dict) else None
        ev = self.events.get(event_id)
        if ev is None:
            self.protocol_error(conn, frame.SerializeToString(), f"ack for unknown frame message_id {fid!r}")
            return
        attempt = next((d for d in ev["deliveries"] if d["frame_message_id"] == fid), None)
        sent_at = attempt["at"] if attempt else ev["deliveries"][-1]["at"]
        ack = {
            "connection": conn.id, "frame_message_id": fid, "event_id": event_id,
            "message_id": ev["message_id"], "code": code, "biz_rt": hs.get(HEADER_BIZ_RT),
            "headers": hs, "payload": payload, "attempt": attempt["attempt"] if attempt else None,
            "delay_ms": round((now() - sent_at) * 1000, 1), "at": now(),
        }
        if ev["kind"] == "card_action" and isinstance(payload, dict) and payload.get("data"):
            ack["answer"], ack["answer_ok"] = self.card_answer(base64.b64decode(payload["data"]))
        self.acks.append(ack)
        if code == 200 and not ev["acked"]:
            ev["acked"] = True
            ev["acked_at"] = now()
            if ev["timer"]:
                ev["timer"].cancel()
                ev["timer"] = None

    async def deliver(self, ev, conn):
        self.seq += 1
        fid = str(uuid.uuid4())
        self.frame_index[fid] = ev["event_id"]
        trace_id = secrets.token_hex(8)
        payload = ev["payload"]
        parts = [payload]
        if ev["split"]:
            n = len(payload)
            cut = [0, n // 3, 2 * n // 3, n]
            if ev["split"] == "token":
                # the first cut in the middle of the verification token's value
                token = self.cfg.verification_token.encode()
                at = payload.find(token)
                if at >= 0:
                    cut = [0, at + len(token) // 2, (at + len(token) // 2 + n) // 2, n]
            parts = [payload[cut[i]:cut[i + 1]] for i in range(3)]
        attempt = len(ev["deliveries"]) + 1
        ok = True
        for i, part in enumerate(parts):
            frame = new_frame(FRAME_DATA, int(conn.service_id),
                              [(HEADER_TYPE, "event"), (HEADER_MESSAGE_ID, fid), (HEADER_SUM, len(parts)),
                               (HEADER_SEQ, i), (HEADER_TRACE_ID, trace_id)],
                              part, seq_id=self.seq, log_id=self.seq)
            ok = await self.send(conn, frame, f"event {ev['event_id']} part {i + 1}/{len(parts)}") and ok
        ev["deliveries"].append({"attempt": attempt, "connection": conn.id, "frame_message_id": fid,
                                 "trace_id": trace_id, "frames": len(parts), "at": now(), "written": ok})
        if ev["timer"]:
            ev["timer"].cancel()
        ev["timer"] = asyncio.get_running_loop().call_later(
            self.cfg.ack_timeout, lambda: asyncio.ensure_future(self.on_timeout(ev["event_id"])))
        await self.notify()

    async def on_timeout(self, event_id):
        ev = self.events.get(event_id)
        if ev is None or ev["acked"]:
            return
        ev["timer"] = None
        if len(ev["deliveries"]) > MAX_REDELIVERIES:
            ev["gave_up"] = True
            await self.notify()
            return
        live = self.open_conns()
        if live:
            await self.deliver(ev, live[-1])
        elif event_id not in self.pending:
            self.pending.append(event_id)

    async def flush_pending(self):
        live = self.open_conns()
        while self.pending and live:
            ev = self.events.get(self.pending.pop(0))
            if ev and not ev["acked"]:
                await self.deliver(ev, live[-1])

    async def on_closed(self, conn):
        for ev in self.events.values():
            if not ev["acked"] and ev["deliveries"] and ev["deliveries"][-1]["connection"] == conn.id:
                if ev["timer"]:
                    ev["timer"].cancel()
                    ev["timer"] = None
                if len(ev["deliveries"]) <= MAX_REDELIVERIES and ev["event_id"] not in self.pending:
                    self.pending.append(ev["event_id"])
        await self.notify()

    async def close_conn(self, conn, code=1000, abrupt=False):
        conn.closed_by = "server"
        conn.closed_at = now()
        conn.close_code = code
        if abrupt and conn.request.transport is not None:
            conn.request.transport.abort()
        else:
            try:
                await asyncio.wait_for(conn.ws.close(code=code), timeout=2)
            except (asyncio.TimeoutError, ConnectionError, RuntimeError):
                if conn.request.transport is not None:
                    conn.request.transport.abort()
        await self.on_closed(conn)

    # ---- control API -----------------------------------------------------------------------------

    async def ctl_push(self, request):
        body = await json_body(request)
        try:
            event = self.event_body(body)
        except ValueError as e:
            return web.json_response({"error": str(e)}, status=400)
        event_id = event["header"]["event_id"]
        message = event["event"].get("message") or {}
        message_id = message.get("message_id") or event["event"]["context"]["open_message_id"]
        ev = {"event_id": event_id, "message_id": message_id, "kind": body.get("kind") or "p2p",
              "payload": json.dumps(event, ensure_ascii=False).encode("utf-8"), "event": event,
              "split": "token" if body.get("split") == "token" else bool(body.get("split")),
              "deliveries": [], "acked": False, "acked_at": None,
              "gave_up": False, "timer": None, "pushed_at": now()}
        self.events[event_id] = ev
        answer = {"event_id": event_id, "message_id": message_id, "frame_message_id": None, "delivered_to": None}
        if message:
            self.record_received(event)
            answer.update(self.pushed_message_facts(message))
        conn = self.pick(body)
        if conn is None:
            self.pending.append(event_id)
            return web.json_response(answer)
        await self.deliver(ev, conn)
        answer.update(frame_message_id=ev["deliveries"][-1]["frame_message_id"], delivered_to=conn.id)
        return web.json_response(answer)

    @staticmethod
    def pushed_message_facts(message):
        """What a test needs of a pushed message: its chat and thread, and a file's key."""
        content = json.loads(message["content"])
        return {"chat_id": message["chat_id"], "thread_id": message.get("thread_id", ""),
                "root_id": message["root_id"],
                "file_key": content.get("file_key") or content.get("image_key")}

    async def ctl_close(self, request):
        body = await json_body(request)
        targets = [self.pick(body)] if body.get("connection") or not body.get("all") else self.open_conns()
        targets = [c for c in targets if c is not None]
        closed = []
        for conn in targets:
            if body.get("config"):
                await self.send_pong(conn, {**self.client_config, **body["config"]})
            await self.close_conn(conn, code=int(body.get("code", 1000)), abrupt=bool(body.get("abrupt")))
            closed.append(conn.id)
        return web.json_response({"closed": closed})

    async def ctl_deaf(self, request):
        body = await json_body(request)
        on = bool(body.get("on", True))
        if not on and not body.get("connection"):
            for c in self.conns.values():
                c.deaf = False
            return web.json_response({"deaf": []})
        conn = self.pick(body)
        if conn is None:
            return web.json_response({"error": "no open connection"}, status=404)
        conn.deaf = on
        return web.json_response({"deaf": [c.id for c in self.conns.values() if c.deaf]})

    async def ctl_config(self, request):
        body = await json_body(request)
        for k in ("ReconnectCount", "ReconnectInterval", "ReconnectNonce", "PingInterval"):
            if k in body:
                self.client_config[k] = int(body[k])
        sent = []
        if body.get("push"):
            for conn in self.open_conns():
                if await self.send_pong(conn):
                    sent.append(conn.id)
        return web.json_response({"config": self.client_config, "sent_to": sent})

    async def ctl_expire(self, request):
        n = 0
        for token, exp in self.tokens.items():
            if exp > now():
                n += 1
            self.tokens[token] = 0
        return web.json_response({"expired": n})

    async def ctl_ratelimit(self, request):
        body = await json_body(request)
        target = body.get("target", "send")
        if target not in ("send", "patch"):
            return web.json_response({"error": "target must be send or patch"}, status=400)
        # send: the gateway's 99991400 (HTTP 429); patch: the per-message 230020 (HTTP 400).
        status, code = (429, CODE_RATE_LIMIT) if target == "send" else (400, CODE_MESSAGE_RATE_LIMIT)
        count_default = 0 if "per_message_qps" in body else 1
        self.ratelimits[target] = {"count": int(body.get("count", count_default)), "reset": int(body.get("reset", 52)),
                                   "limit": int(body.get("limit", 100)), "status": int(body.get("status", status)),
                                   "code": int(body.get("code", code))}
        if target == "patch" and "per_message_qps" in body:
            self.patch_qps = float(body["per_message_qps"] or 0) or None
        return web.json_response({"target": target, "ratelimit": self.ratelimits[target],
                                  "per_message_qps": self.patch_qps})

    async def ctl_slow(self, request):
        body = await json_body(request)
        path, seconds = body.get("path"), float(body.get("seconds", 0))
        if not path:
            return web.json_response({"error": "path is required"}, status=400)
        if seconds > 0:
            self.slow[path] = seconds
        else:
            self.slow.pop(path, None)
        return web.json_response({"slow": self.slow})

    async def ctl_endpoint_fail(self, request):
        body = await json_body(request)
        self.endpoint_fail = {"count": int(body.get("count", 1)), "code": int(body.get("code", 1)),
                              "msg": str(body.get("msg", "system busy"))}
        return web.json_response({"endpoint_fail": self.endpoint_fail})

    def webhook_plaintext(self, body):
        token = self.cfg.verification_token
        if body.get("wrong_token"):
            token = "wrong-" + (token or "token")
        if body.get("kind") == "url_verification":
            # https://open.feishu.cn/document/ukTMukTMukTM/uYDNxYjL2QTM24iN0EjN/event-subscription-configure-/request-url-configuration-case
            return {"challenge": body.get("challenge") or str(uuid.uuid4()), "token": token,
                    "type": "url_verification"}
        return self.event_body(body, token=token)

    async def ctl_webhook_send(self, request):
        # https://open.feishu.cn/document/ukTMukTMukTM/uYDNxYjL2QTM24iN0EjN/event-subscription-configure-/choose-a-subscription-mode/send-notifications-to-developers-server
        # and .../encrypt-key-encryption-configuration-case: a POST of the event (or
        # {"encrypt": ...}) with X-Lark-Request-Timestamp, X-Lark-Request-Nonce, X-Lark-Signature.
        # Not answered with HTTP 200 in time -> pushed again, at most 4 retries.
        body = await json_body(request)
        url = body.get("url")
        if not url:
            return web.json_response({"error": "url is required"}, status=400)
        key = self.cfg.encrypt_key or ""
        plain = None
        if "body" in body:
            raw = body["body"].encode("utf-8")
        else:
            try:
                plain = self.webhook_plaintext(body)
            except ValueError as e:
                return web.json_response({"error": str(e)}, status=400)
            if plain.get("header", {}).get("event_type") == "im.message.receive_v1":
                self.record_received(plain)
            text = json.dumps(plain, ensure_ascii=False)
            encrypted = body.get("encrypted", bool(key))
            if encrypted:
                if not key:
                    return web.json_response({"error": "no --encrypt-key to encrypt with"}, status=400)
                raw = json.dumps({"encrypt": encrypt(key, text)}).encode("utf-8")
            else:
                raw = text.encode("utf-8")
        ts = int(body.get("timestamp") or now())
        if body.get("stale"):
            ts -= 360
        timestamp = str(ts)
        nonce = secrets.token_hex(8)
        sig = signature(timestamp, nonce, key, raw)
        if body.get("bad_signature"):
            sig = ("0" if sig[0] != "0" else "1") + sig[1:]
        headers = {"Content-Type": "application/json; charset=utf-8",
                   "X-Lark-Request-Timestamp": timestamp, "X-Lark-Request-Nonce": nonce,
                   "X-Lark-Signature": sig, "User-Agent": "fake-feishu/1"}
        retries = max(0, min(int(body.get("retries", 0)), MAX_WEBHOOK_RETRIES))
        timeout = aiohttp.ClientTimeout(total=float(body.get("timeout", 10)))
        attempts = []
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for i in range(1 + retries):
                if i:
                    await asyncio.sleep(float(body.get("retry_interval", 0.2)))
                t0 = time.monotonic()
                try:
                    async with session.post(url, data=raw, headers=headers) as resp:
                        text = await resp.text()
                        attempts.append({"status": resp.status, "body": text, "headers": dict(resp.headers),
                                         "elapsed_ms": round((time.monotonic() - t0) * 1000, 1)})
                except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                    attempts.append({"status": None, "body": None, "error": repr(e),
                                     "elapsed_ms": round((time.monotonic() - t0) * 1000, 1)})
                if body.get("until_ok") and attempts[-1]["status"] == 200:
                    break
        if body.get("kind") == "card_action":
            for attempt in attempts:
                if attempt["status"] == 200:
                    attempt["answer"], attempt["answer_ok"] = self.card_answer(attempt["body"])
        sent = {"url": url, "headers": headers, "body": raw.decode("utf-8"), "plaintext": plain,
                "attempts": attempts, "at": now()}
        self.webhooks.append(sent)
        await self.notify()
        last = attempts[-1]
        return web.json_response({"attempts": attempts, "status": last["status"], "body": last["body"],
                                  "elapsed_ms": last["elapsed_ms"], "sent": sent})

    def calls_for(self, path):
        if not path:
            return list(self.calls)
        if path.endswith("*"):
            return [c for c in self.calls if c["path"].startswith(path[:-1])]
        return [c for c in self.calls if c["path"] == path]

    def events_view(self):
        return [{k: v for k, v in ev.items() if k not in ("timer", "payload")} for ev in self.events.values()]

    async def ctl_calls(self, request):
        return web.json_response({"calls": self.calls_for(request.query.get("path"))})

    async def ctl_acks(self, request):
        return web.json_response({"acks": self.acks, "events": self.events_view(),
                                  "protocol_errors": self.protocol_errors})

    async def ctl_connections(self, request):
        return web.json_response({"open": len(self.open_conns()),
                                  "connections": [c.describe() for c in self.conns.values()]})

    async def ctl_messages(self, request):
        return web.json_response({"messages": self.messages, "reactions": list(self.reactions.values())})

    async def ctl_webhooks(self, request):
        return web.json_response({"sent": self.webhooks})

    async def ctl_history_seed(self, request):
        """Stores text messages in a chat as if said earlier (no events): users' or the bot's."""
        body = await json_body(request)
        chat_id = body.get("chat_id") or ""
        if not chat_id.startswith("oc_"):
            return web.json_response({"error": "chat_id (oc_...) is required"}, status=400)
        chat_type = body.get("chat_type") or self.chat_type_of(chat_id)
        ids = []
        for m in body.get("messages") or []:
            sender = self.app_sender() if m.get("bot") else self.user_sender(m.get("user") or DEFAULT_USER)
            record = self.store_message(chat_id, "text", compact_json({"text": m.get("text", "")}),
                                        sender, root_id=m.get("root_id", ""), parent_id=m.get("parent_id", ""),
                                        thread_id=m.get("thread_id", ""), chat_type=chat_type,
                                        create_time=m.get("create_time"))
            ids.append(record["message_id"])
        await self.notify()
        return web.json_response({"chat_id": chat_id, "message_ids": ids})

    def history_for(self, chat_id=None, thread_id=None):
        return [r for r in self.store.values()
                if (not chat_id or r["chat_id"] == chat_id) and (not thread_id or r["thread_id"] == thread_id)]

    async def ctl_history(self, request):
        q = request.query
        return web.json_response({"messages": self.history_for(q.get("chat_id"), q.get("thread_id"))})

    def files_view(self):
        return [{k: v for k, v in u.items() if k != "data"} for u in self.uploads.values()]

    async def ctl_files(self, request):
        return web.json_response({"files": self.files_view()})

    async def ctl_downloads(self, request):
        return web.json_response({"downloads": self.downloads})

    async def ctl_updates(self, request):
        mid = request.query.get("message_id")
        return web.json_response({"updates": [u for u in self.updates if not mid or u["message_id"] == mid]})

    async def ctl_scopes(self, request):
        body = await json_body(request)
        if "history" in body:
            self.history_scope = bool(body["history"])
        return web.json_response({"history": self.history_scope})

    def items(self, what, path):
        if what == "calls":
            return self.calls_for(path)
        if what == "acks":
            return self.acks
        if what == "connections":
            return [c.describe() for c in self.open_conns()]
        if what == "pings":
            return [dict(p, connection=c.id) for c in self.conns.values() for p in c.pings]
        if what == "deliveries":
            return [dict(d, event_id=ev["event_id"]) for ev in self.events.values() for d in ev["deliveries"]]
        if what == "webhooks":
            return self.webhooks
        if what == "messages":
            return self.messages
        if what == "history":
            return self.history_for(path)
        if what == "files":
            return self.files_view()
        if what == "downloads":
            return [d for d in self.downloads if d["finished_at"] is not None]
        if what == "updates":
            return [u for u in self.updates if not path or u["message_id"] == path]
        if what == "protocol_errors":
            return self.protocol_errors
        raise KeyError(what)

    async def ctl_wait(self, request):
        q = request.query
        what = q.get("what", "calls")
        count = int(q.get("count", "1"))
        timeout = float(q.get("timeout", "5"))
        try:
            self.items(what, q.get("path"))
        except KeyError:
            return web.json_response({"error": f"unknown what={what!r}"}, status=400)
        return await fake_control.wait_for(
            self.changed, lambda: self.items(what, q.get("path")), count, timeout
        )

    async def ctl_reset(self, request):
        body = await json_body(request)
        for ev in self.events.values():
            if ev["timer"]:
                ev["timer"].cancel()
        if body.get("close_sockets"):
            for conn in self.open_conns():
                await self.close_conn(conn)
        self.reset_state()
        self.conns = {cid: c for cid, c in self.conns.items() if c.open}
        for c in self.conns.values():
            c.pings, c.pongs, c.frames_sent, c.deaf = [], [], [], False
        await self.notify()
        return web.json_response({"reset": True, "open": len(self.open_conns())})

    async def shutdown(self):
        for conn in self.open_conns():
            conn.closed_by = "server"
            try:
                await asyncio.wait_for(conn.ws.close(code=1001), timeout=1)
            except (asyncio.TimeoutError, ConnectionError, RuntimeError):
                if conn.request.transport is not None:
                    conn.request.transport.abort()


def build_app(fake: Fake) -> web.Application:
    # Room for an upload past the 30 MB file limit to reach the handler (and its documented
    # 234006) instead of aiohttp's own 413 at 1 MiB.
    app = web.Application(client_max_size=2 * MAX_UPLOAD_BYTES["file"])
    app.router.add_get("/ws", fake.ws)
    app.router.add_post("/_test/ws/push", fake.ctl_push)
    app.router.add_post("/_test/ws/close", fake.ctl_close)
    app.router.add_post("/_test/ws/deaf", fake.ctl_deaf)
    app.router.add_post("/_test/ws/config", fake.ctl_config)
    app.router.add_post("/_test/tokens/expire", fake.ctl_expire)
    app.router.add_post("/_test/ratelimit", fake.ctl_ratelimit)
    app.router.add_post("/_test/slow", fake.ctl_slow)
    app.router.add_post("/_test/endpoint/fail", fake.ctl_endpoint_fail)
    app.router.add_post("/_test/webhook/send", fake.ctl_webhook_send)
    app.router.add_get("/_test/calls", fake.ctl_calls)
    app.router.add_get("/_test/acks", fake.ctl_acks)
    app.router.add_get("/_test/connections", fake.ctl_connections)
    app.router.add_get("/_test/messages", fake.ctl_messages)
    app.router.add_get("/_test/webhooks", fake.ctl_webhooks)
    app.router.add_post("/_test/history", fake.ctl_history_seed)
    app.router.add_get("/_test/history", fake.ctl_history)
    app.router.add_get("/_test/files", fake.ctl_files)
    app.router.add_get("/_test/downloads", fake.ctl_downloads)
    app.router.add_get("/_test/updates", fake.ctl_updates)
    app.router.add_post("/_test/scopes", fake.ctl_scopes)
    app.router.add_get("/_test/wait", fake.ctl_wait)
    app.router.add_post("/_test/reset", fake.ctl_reset)
    app.router.add_route("*", "/open-apis/{tail:.*}", fake.api)
    app.router.add_route("*", GEN_ENDPOINT_URI, fake.api)
    return app


def parse_args(argv=None):
    def env(name, default):
        return os.environ.get("FAKE_FEISHU_" + name, default)

    p = argparse.ArgumentParser(description="A local fake of Feishu/Lark for pincer's tests.")
    p.add_argument("--host", default=env("HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env("PORT", "0")))
    p.add_argument("--app-id", default=env("APP_ID", "cli_fake"))
    p.add_argument("--app-secret", default=env("APP_SECRET", "fake-app-secret"))
    p.add_argument("--encrypt-key", default=env("ENCRYPT_KEY", ""))
    p.add_argument("--verification-token", default=env("VERIFICATION_TOKEN", "fake-verification-token"))
    p.add_argument("--token-ttl", type=int, default=int(env("TOKEN_TTL", "7200")))
    # ClientConfig defaults: the SDK's own local defaults (lark_oapi/ws/client.py Client.__init__).
    p.add_argument("--ping-interval", type=int, default=int(env("PING_INTERVAL", "120")))
    p.add_argument("--reconnect-count", type=int, default=int(env("RECONNECT_COUNT", "-1")))
    p.add_argument("--reconnect-interval", type=int, default=int(env("RECONNECT_INTERVAL", "120")))
    p.add_argument("--reconnect-nonce", type=int, default=int(env("RECONNECT_NONCE", "30")))
    p.add_argument("--ack-timeout", type=float, default=float(env("ACK_TIMEOUT", "3")))
    p.add_argument("--bot-open-id", default=env("BOT_OPEN_ID", "ou_bot0fake0000000000000000000000"))
    p.add_argument("--bot-name", default=env("BOT_NAME", "pincer-bot"))
    # bot/v3/info's activate_status: 2 enabled; 0 not installed, 1 disabled, 3 installed and
    # waiting to be enabled, ... (the docs page linked at the handler).
    p.add_argument("--bot-activate-status", type=int, default=int(env("BOT_ACTIVATE_STATUS", "2")))
    p.add_argument("--tenant-key", default=env("TENANT_KEY", "736588c9260f175e"))
    # The app lacks "获取群组中所有消息" (im:message.group_msg): message/list of a group or a
    # thread answers 230027.
    p.add_argument("--no-history-scope", action="store_true",
                   default=env("NO_HISTORY_SCOPE", "") not in ("", "0", "false"))
    args = p.parse_args(argv)
    if args.host not in LOOPBACK:
        p.error(f"--host must be a loopback address, not {args.host!r}")
    return args


async def serve(cfg):
    fake = Fake(cfg)

    def ready(port, host, base):
        fake.port, fake.host = port, host
        return {"port": port, "base": base, "control": f"{base}/_test"}

    await fake_control.serve(build_app(fake), cfg.host, cfg.port, ready, fake.shutdown)


def main() -> None:
    asyncio.run(serve(parse_args()))
    sys.exit(0)


if __name__ == "__main__":
    main()
