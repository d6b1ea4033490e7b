"""A local fake of Slack for pincer's end-to-end tests: Web API, Socket Mode, Events API sender,
files (in and out), message history and AI-app thread status.

Usage: fake_slack.py [--host 127.0.0.1] [--port 0] [--bot-token xoxb-...] [--app-token xapp-...]
                     [--signing-secret S] [--team-id T0TEAM] [--app-id A0APP] [--bot-user-id U0BOT]
                     [--bot-id B0BOT] [--channels C1,D2] [--ack-timeout 3]
                     [--scopes app_mentions:read,chat:write,...] [--assistant]
Every flag can also be given by environment: FAKE_SLACK_BOT_TOKEN, FAKE_SLACK_APP_TOKEN,
FAKE_SLACK_SIGNING_SECRET, FAKE_SLACK_TEAM_ID, FAKE_SLACK_APP_ID, FAKE_SLACK_BOT_USER_ID,
FAKE_SLACK_BOT_ID, FAKE_SLACK_CHANNELS, FAKE_SLACK_ACK_TIMEOUT, FAKE_SLACK_SCOPES,
FAKE_SLACK_ASSISTANT (1/true: the app is an AI app) (flags win).
Web API answers to the bot token carry `x-oauth-scopes` (the --scopes list), as Slack's do. The
default scopes lack channels:history, groups:history, files:read and files:write: the methods
that need them answer missing_scope ({"ok": false, "error": "missing_scope", "needed": S,
"provided": "<the --scopes list>"}) until --scopes grants them.

Serves on loopback only. When ready it prints one JSON line to stdout,
  {"port": N, "api_base": "http://127.0.0.1:N/api", "control": "http://127.0.0.1:N/_test"}
and serves until killed (SIGTERM or SIGINT: exit 0). BASE below is http://127.0.0.1:N.

Web API, `POST|GET /api/<method>`, form-encoded, query or JSON bodies; the token is read from
`Authorization: Bearer` or (form and query only, as Slack does) a `token` field. Wrong token:
`invalid_auth`, none: `not_authed`, wrong kind: `not_allowed_token_type`, all HTTP 200.
Arguments Slack's schema refuses: {"ok": false, "error": "invalid_arguments",
"response_metadata": {"messages": ["[ERROR] <why>"]}}.
  auth.test                bot token (an app-level token is accepted too)
  apps.connections.open    app-level token, header only -> ws://HOST:N/link/?ticket=<uuid>&app_id=A0APP
  chat.postMessage         bot token; channel_not_found, no_text, msg_too_long (> 40 000 chars),
                           invalid_blocks (blocks slack_sdk's Block Kit models refuse). A user id
                           (U…/W…) as channel posts into the app's DM with that user: the D… of
                           the first DM event pushed from that user, else "D" + the id's tail
                           (U0ALICE -> D0ALICE); the answer's `channel` is that D….
                           A reply clears the thread's assistant status (see /_test/status).
  chat.update              bot token; channel + ts: message_not_found (no such message),
                           cant_update_message (not the bot's); invalid_blocks as above
  chat.postEphemeral       bot token; channel + user -> {"message_ts"}; user_not_in_channel
                           when the user is "U0NOTHERE"
  reactions.add / .remove  bot token; already_reacted / no_reaction, invalid_name, no_item_specified
  conversations.history    bot token + channels:history (C…) / groups:history (G…) / im:history
                           (D…); channel, limit (100, at most 999), cursor, latest, oldest,
                           inclusive -> {"ok", "messages" (top-level only, newest first),
                           "has_more", "pin_count": 0, "channel_actions_ts": null,
                           "channel_actions_count": 0, "response_metadata": {"next_cursor"} (only
                           when has_more), "latest" (when given)}; channel_not_found,
                           invalid_cursor, invalid_ts_latest, invalid_ts_oldest
  conversations.replies    same scopes; channel, ts (the parent or any reply), limit (1000, at
                           most 1000), cursor, latest, oldest, inclusive -> {"ok", "messages"
                           (parent first, then replies oldest first), "has_more",
                           "response_metadata"}; thread_not_found, channel_not_found, ...
                           A parent carries thread_ts, reply_count, reply_users_count,
                           reply_users, latest_reply; a reply thread_ts and parent_user_id.
  files.getUploadURLExternal  bot token + files:write; filename, length, alt_txt, snippet_type
                           -> {"ok": true, "upload_url": "BASE/upload/v1/<opaque>", "file_id": "F…"};
                           invalid_arguments (filename or length missing, length not an
                           integer), missing_argument (length 0), alt_txt_too_large (> 1000),
                           snippet_too_large (snippet_type with length > 1 MB)
  files.completeUploadExternal  bot token + files:write; files (JSON array [{"id", "title"}]),
                           channel_id or channels (comma-separated; a user id means the DM),
                           thread_ts, initial_comment, blocks (ignored with initial_comment)
                           -> {"ok": true, "files": [file object, …]}; file_not_found (unknown
                           id, nothing uploaded yet, or completed already), file_update_failed
                           (the bytes uploaded differ in length from the declared `length`; the
                           reason in response_metadata.messages), channel_not_found,
                           invalid_blocks. With a channel, a message carrying the files
                           (subtype file_share, text = initial_comment) joins its history, in
                           the thread when thread_ts is given.
  assistant.threads.setStatus  bot token + chat:write or assistant:write (missing_scope names
                           chat:write); channel_id, thread_ts, status ("" clears),
                           loading_messages (1-10 strings of 1-50 chars) -> {"ok": true};
                           channel_not_found, invalid_thread_ts, invalid_arguments. Without
                           --assistant, a DM (D…) thread answers access_denied (channels
                           work: Slack lets any app with chat:write set a status there).
  anything else            {"ok": false, "error": "unknown_method"}
Every call is recorded (headers, raw body, parsed arguments, answer, arrival time).

Files, outside the Web API:
  POST BASE/upload/v1/<opaque>   the upload_url: the raw bytes, or multipart/form-data with the
                                 bytes in a part named `file` or `filename` -> 200 "OK - <length>"
                                 (text/plain); an unknown upload_url -> 404
  GET  BASE/files-pri/TEAM-FILEID/NAME (url_private) and …/TEAM-FILEID/download/NAME
       (url_private_download): with `Authorization: Bearer <bot token>` and files:read, the bytes
       with the file's mimetype (and Content-Length); otherwise (no token, a wrong one, or no
       files:read) a 302 to BASE/?redir=<path>, whose page is a 200 text/html sign-in page, as
       Slack answers an unauthenticated file request. Every GET is recorded (/_test/downloads).

Socket Mode, `GET /link/?ticket=...`: an unknown or used ticket gets HTTP 401; the 11th open
connection gets a `too_many_websockets` disconnect and is closed. On connect: `hello`. Envelopes
not acked (`{"envelope_id": ...}`) within --ack-timeout seconds (3, as Slack) or whose socket
dropped are redelivered on the newest live connection (the next one if none) with retry_attempt
+1 and retry_reason "timeout", at most 3 times. Other frames are recorded as protocol errors.

Messages and history: each channel keeps a log, in ts order, of every dm/mention event pushed
(/_test/socket/push, /_test/events/send), every message the bot posts (chat.postMessage,
completed uploads) and every message seeded with /_test/history; chat.update changes it. It is
what conversations.history and conversations.replies serve. A person's message is stored as
{"type": "message", "user", "text", "ts", "thread_ts"?} (a mention's text with its "<@BOT>"),
with files as a file_share message ("subtype": "file_share", "files", "upload": true,
"display_as_bot": false); the bot's as chat.postMessage answers it (bot_id, user = the bot user,
subtype bot_message, or file_share for an upload's message).

Files in events: a push (socket or events/send) of kind dm or mention may carry
  "files": [{"name": "a.txt", "mimetype": "text/plain" (default: guessed from the name),
             "content_b64": "..." or "content": "text", "title" (default: name),
             "size": N (what the file object claims; default: the real length),
             "url": "http://…" (replaces url_private and url_private_download),
             "stream_bytes": N (the download sends N zero bytes, streamed, whatever the size),
             "stream_fill": "x" (stream that character's byte instead of zeros),
             "chunked": true (the download is sent chunked, without Content-Length)}]
Each gets an id F…, is served at its url_private, and the event carries "files": [file object]
with {"id", "created", "timestamp", "name", "title", "mimetype", "filetype", "pretty_type",
"user", "user_team", "editable": false, "size", "mode": "hosted", "is_external": false,
"external_type": "", "is_public": false, "public_url_shared": false, "display_as_bot": false,
"username": "", "url_private", "url_private_download", "permalink", "permalink_public",
"has_rich_preview": false, "file_access": "visible"}. A DM's event then has "subtype":
"file_share", "upload": true, "display_as_bot": false; a mention (app_mention, which has no
subtypes) "upload": false, "display_as_bot": false. The push's answer lists the file objects.

Control API, JSON in and out (POST bodies may be empty; `connection` defaults to the newest
open connection):
  POST /_test/socket/push        {"kind": "dm"|"mention"|"slash"|"interactive", "text", "user",
                                  "channel", "thread_ts", "event_id", "ts", "files", "command",
                                  "trigger_id", "action_id", "value", "action_ts", "connection"}
                                 (interactive: a click on the button `action_id` of message
                                  `ts`, a `block_actions` payload; `action_ts` new each time
                                  unless given; slash: the payload of events/send's slash)
                                 -> {"envelope_id", "event_id", "ts", "delivered_to", "files"}
                                 (a mention's text gets "<@BOT> " prepended unless it has it)
  POST /_test/socket/disconnect  {"reason": "warning"|"refresh_requested"|"link_disabled",
                                  "connection", "close_after": s (refresh_requested 3,
                                  link_disabled 1, warning: never)} -> {"sent_to": [ids]}
  POST /_test/socket/close       {"connection", "code": 1001, "abrupt": bool (TCP abort, no
                                  close frame), "push": {push body} (push then close at once,
                                  before an ack can arrive), "half": bool (with push: write the
                                  first half of the envelope frame, then abort)} -> {"closed": [ids]}
  POST /_test/socket/deaf        {"on": bool, "connection"} : stop/resume sending anything and
                                  answering pings on that connection ({"on": false} clears all)
  POST /_test/ratelimit          {"method", "count": K, "retry_after": S} : the next K calls of
                                  method (any Web API method) get HTTP 429, Retry-After: S,
                                  {"ok":false,"error":"ratelimited"}
  POST /_test/channels           {"channels": [ids] | null} : known channels (null: any C/D/G id)
  POST /_test/events/send        {"url", "kind": "dm"|"mention"|"slash"|"url_verification"|
                                  "interactive", "text", "user", "channel", "thread_ts",
                                  "event_id", "ts", "files", "command" (slash: "/pincer"),
                                  "trigger_id", "action_id", "action_ts", "challenge", "body"
                                  (raw string sent as is), "stale": bool (timestamp 6 min old,
                                  correctly signed), "bad_signature": bool, "no_signature": bool,
                                  "timestamp": int, "retry_num": n, "retry_reason": "http_timeout",
                                  "timeout": s (10)}
                                 (slash: a form-encoded body token, team_id, team_domain,
                                  channel_id, channel_name, user_id, user_name, command, text,
                                  response_url (BASE/commands/…, recorded as calls of method
                                  "response_url"), trigger_id (new each time), api_app_id)
                                 -> {"status", "headers", "body", "elapsed_ms", "sent": {...}, "files"}
  POST /_test/history            {"channel" (or a user id: the DM), "messages": [{"user" (U0USER),
                                  "text", "ts" (default: a new, increasing one), "thread_ts",
                                  "bot": bool (posted by the bot), "files": [as in pushes]}]}
                                 -> {"channel", "ts": [ts, …]} : adds to the log, sends nothing
  GET  /_test/history?channel=C  -> {"channels": {C: [message as conversations.* show it, oldest
                                  first]}, "dm_channels": {user: D}} (every channel if none given)
  GET  /_test/files              -> {"files": [every completed upload: {"file_id", "name",
                                  "title", "length", "declared_length", "content_b64", "sha256",
                                  "content_type", "upload_form": "raw"|"multipart", "alt_txt",
                                  "snippet_type", "channel_id", "thread_ts", "initial_comment",
                                  "message_ts", "completed_at"}], "pending": [uploads not
                                  completed: {"file_id", "name", "declared_length", "length"
                                  (null before any upload), "length_mismatch", "uploaded_at"}]}
  GET  /_test/downloads          -> {"downloads": [{"path", "file_id", "authorization": bool
                                  (a Bearer header came), "auth_ok", "refused": why | null,
                                  "status", "bytes_total", "bytes_sent", "hung_up" (the client
                                  left before the last byte), "started_at", "finished_at"}]}
  GET  /_test/status             -> {"statuses": [{"channel_id", "thread_ts", "status",
                                  "loading_messages", "cleared" (status ""), "by":
                                  "setStatus"|"reply", "at"}]} in order: every setStatus, and
                                  the clearing a bot reply in that thread makes
  GET  /_test/calls?method=M     -> {"calls": [...]} every recorded Web API call (429s included)
  GET  /_test/acks               -> {"acks": [...], "envelopes": [...], "protocol_errors": [...]}
  GET  /_test/connections        -> {"open": n, "connections": [...]} with pings, frames, times
  GET  /_test/events/sent        -> {"sent": [...]} every events/send
  GET  /_test/wait?what=calls|acks|connections|protocol_errors|events_sent|files|downloads|
                   statuses&method=M&count=N&timeout=S
                                 -> 200 {"count", "items"} once N are recorded, else 408
  POST /_test/reset              {"close_sockets": bool} : forget calls, acks, envelopes,
                                  reactions, rate limits, events sent, closed connections,
                                  messages, files, uploads, downloads, statuses
"""

import argparse
import asyncio
import base64
import binascii
import hashlib
import json
import mimetypes
import os
import secrets
import struct
import sys
import time
import uuid
from decimal import Decimal, InvalidOperation
from urllib.parse import parse_qsl, quote, urlencode

import aiohttp
from aiohttp import web

import fake_control
from fake_control import json_body
from slack_sdk.models.blocks import Block
from slack_sdk.signature import SignatureVerifier

LOOPBACK = {"127.0.0.1", "::1", "localhost"}
MAX_CONNECTIONS = 10  # https://docs.slack.dev/apis/events-api/using-socket-mode ("up to 10")
MAX_RETRIES = 3
MAX_TEXT = 40_000
# https://docs.slack.dev/reference/methods/conversations.history: limit "Maximum of 999", default
# 100; .../conversations.replies: limit default 1000, maximum 1000.
HISTORY_LIMIT, HISTORY_MAX = 100, 999
REPLIES_LIMIT, REPLIES_MAX = 1000, 1000
# The *:history scope a conversation's kind needs (.../conversations.history: "Relevant
# *:history scope"; channels:history for public channels, groups:history for private ones,
# im:history for DMs).
HISTORY_SCOPES = {"C": "channels:history", "G": "groups:history", "D": "im:history"}
# https://docs.slack.dev/reference/methods/files.getUploadURLExternal: alt_txt_too_large "longer
# than the limit of 1000 character", snippet_too_large "snippets, which are limited to 1MB".
MAX_ALT_TXT = 1000
MAX_SNIPPET = 1024 * 1024
# https://docs.slack.dev/reference/methods/assistant.threads.setStatus: loading_messages
# "Maximum of 10 messages", each 1 to 50 characters (the method's argument schema).
MAX_LOADING_MESSAGES, MAX_LOADING_MESSAGE = 10, 50
DOWNLOAD_CHUNK = 64 * 1024
# Largest request body taken (aiohttp's default is 1 MiB): Slack's upload limit, 1 GB (slack_sdk's
# MAX_V2_FILE_SIZE, "Slack files.upload limit").
MAX_UPLOAD = 1024 ** 3
# filetype and pretty_type of a file object by extension (as files.info's example says
# "filetype": "gif", "pretty_type": "GIF"); anything else is "binary".
FILETYPES = {
    ".txt": ("text", "Plain Text"),
    ".md": ("markdown", "Markdown (raw)"),
    ".csv": ("csv", "CSV"),
    ".json": ("json", "JSON"),
    ".py": ("python", "Python"),
    ".pdf": ("pdf", "PDF"),
    ".png": ("png", "PNG"),
    ".jpg": ("jpg", "JPEG"),
    ".jpeg": ("jpg", "JPEG"),
    ".gif": ("gif", "GIF"),
    ".zip": ("zip", "Zip"),
    ".mp4": ("mp4", "MPEG 4 Video"),
}


def now() -> float:
    return time.time()


def ts_value(ts):
    """A Slack timestamp ("1700000000.000100") as a number to compare, None if it is not one."""
    try:
        value = Decimal(str(ts))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def ts_order(ts):
    """Sort key of a message's ts: by value, anything that is no timestamp last."""
    value = ts_value(ts)
    return (value is None, value if value is not None else 0)


def truthy(value) -> bool:
    """A boolean argument as Slack reads it from a form, a query or JSON ("true", "1", true)."""
    return str(value).strip().lower() in ("1", "true")


def is_user_id(value) -> bool:
    """A user id (U… or W…, https://docs.slack.dev/reference/methods/chat.postMessage: a user
    id as `channel` posts to the app's DM with that user)."""
    return isinstance(value, str) and len(value) > 1 and value[0] in "UW" and value[1:].isalnum() \
        and value == value.upper()


def cursor_for(ts) -> str:
    # Slack's cursors are opaque base64; the documented ones decode to the ts to go on from
    # (conversations.history's "bmV4dF90czoxNTEyMDg1ODYxMDAwNTQz" is "next_ts:1512085861000543").
    return base64.b64encode(f"next_ts:{ts}".encode()).decode()


def ts_from_cursor(cursor):
    try:
        decoded = base64.b64decode(cursor, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    prefix, _, ts = decoded.partition(":")
    return ts if prefix == "next_ts" and ts else None


def invalid_arguments(why):
    """Slack's answer to arguments its schema refuses: `invalid_arguments` ("The method was called
    with invalid arguments", in every method's error table on docs.slack.dev) with the reason
    in response_metadata.messages, as Slack words them ("[ERROR] 0 is not a valid thread_ts")."""
    return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": [f"[ERROR] {why}"]}}


def event_files(payload):
    """The file objects an event_callback payload's event carries ([] for anything else)."""
    event = payload.get("event") if isinstance(payload, dict) else None
    return event.get("files", []) if isinstance(event, dict) else []


def file_share(files):
    """What a message carrying `files` has (https://docs.slack.dev/reference/events/message/file_share;
    @slack/types' FileShareMessageEvent: subtype "file_share", files, upload, display_as_bot), as a
    captured message.im shows it: "files": [...], "upload": true, "display_as_bot": false,
    "subtype": "file_share" (slack-web's golden message_file_share.json)."""
    return {"subtype": "file_share", "files": files, "upload": True, "display_as_bot": False}


def file_kind(name):
    """(filetype, pretty_type) of a file named `name`."""
    return FILETYPES.get(os.path.splitext(name)[1].lower(), ("binary", "Binary"))


def zero_chunks(total, fill=b"\0"):
    """`total` bytes of `fill` (zeros by default) in DOWNLOAD_CHUNK pieces, made as they are sent."""
    chunk = fill * DOWNLOAD_CHUNK
    left = total
    while left > 0:
        yield chunk if left >= DOWNLOAD_CHUNK else fill * left
        left -= DOWNLOAD_CHUNK


def data_chunks(data):
    for start in range(0, len(data), DOWNLOAD_CHUNK):
        yield data[start:start + DOWNLOAD_CHUNK]


def parsed_blocks(args):
    """The `blocks` argument (a JSON string in a form, a list in JSON), checked by slack_sdk's
    Block Kit models as Slack checks them: (blocks, None), or (None, why) when Slack would answer
    invalid_blocks. Validation covers the limits the models know (section text 3000, button
    text 75 and action_id 255 characters, at most 25 elements in an actions block, styles)."""
    value = args.get("blocks")
    if value is None:
        return None, None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as error:
            return None, f"blocks is not JSON: {error}"
    if not isinstance(value, list):
        return None, "blocks must be an array"
    try:
        parsed = Block.parse_all(value)
        for block, raw in zip(parsed, value):
            if block is None or type(block) is Block:
                return None, f"unknown block type {raw.get('type')!r}"
            block.validate_json()
            # to_dict() validates too and must give the block back as sent.
            if block.to_dict() != raw:
                return None, f"block {raw.get('type')!r} does not round-trip: {block.to_dict()} != {raw}"
    except Exception as error:  # slack_sdk raises SlackObjectFormationError and friends
        return None, f"{type(error).__name__}: {error}"
    return value, None


class Conn:
    def __init__(self, cid, ws, request, ticket):
        self.id = cid
        self.ws = ws
        self.request = request
        self.ticket = ticket
        self.opened_at = now()
        self.closed_at = None
        self.close_code = None
        self.closed_by = None
        self.deaf = False
        self.refused = False
        self.pings = []
        self.pongs = []
        self.frames_sent = []
        self.frames_received = 0
        self.lock = asyncio.Lock()

    @property
    def open(self):
        return self.closed_at is None and not self.refused

    def describe(self):
        return {
            "id": self.id,
            "ticket": self.ticket,
            "opened_at": self.opened_at,
            "closed_at": self.closed_at,
            "close_code": self.close_code,
            "closed_by": self.closed_by,
            "open": self.open,
            "deaf": self.deaf,
            "refused": self.refused,
            "pings": list(self.pings),
            "pongs": list(self.pongs),
            "frames_sent": list(self.frames_sent),
            "frames_received": self.frames_received,
        }


class Fake:
    def __init__(self, cfg):
        self.cfg = cfg
        self.verifier = SignatureVerifier(cfg.signing_secret)
        self.port = None
        self.host = cfg.host
        self.channels = set(cfg.channels) if cfg.channels else None
        self.scopes = {scope.strip() for scope in cfg.scopes.split(",") if scope.strip()}
        self.ts_counter = 0
        self.event_counter = 0
        self.conn_counter = 0
        self.file_counter = 0
        self.command_counter = 0
        self.changed = asyncio.Condition()
        self.conns = {}
        self.tickets = {}
        self.reset_state()

    def reset_state(self):
        self.calls = []
        self.acks = []
        self.protocol_errors = []
        self.envelopes = {}
        self.pending = []  # envelope ids waiting for a live connection
        self.reactions = set()
        self.ratelimits = {}
        self.events_sent = []
        self.channel_logs = {}  # channel -> [message], in ts order: what conversations.* serve
        self.dm_channels = {}  # user id -> the app's DM channel with that user
        self.files = {}  # file id -> {"object": file object, "data": bytes, "stream_bytes": n | None}
        self.uploads = {}  # file id -> an upload begun with files.getUploadURLExternal
        self.upload_tickets = {}  # the opaque part of an upload_url -> file id
        self.downloads = []
        self.statuses = []

    # ---- ids -----------------------------------------------------------------------------------

    def next_ts(self):
        self.ts_counter += 1
        micros = 1_700_000_000 * 1_000_000 + 100 * self.ts_counter
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

    def next_event_id(self):
        self.event_counter += 1
        return f"Ev0FAKE{self.event_counter:05d}"

    def next_file_id(self):
        self.file_counter += 1
        return f"F0FILE{self.file_counter:05d}"

    @property
    def base_url(self):
        return f"http://{self.host}:{self.port}"

    async def notify(self):
        async with self.changed:
            self.changed.notify_all()

    # ---- payloads --------------------------------------------------------------------------------

    def authorizations(self):
        # Shape of https://docs.slack.dev/reference/events/app_mention ("authorizations"), with the
        # fake's bot user: the installing bot is who a bot token acts for.
        return [
            {
                "enterprise_id": None,
                "team_id": self.cfg.team_id,
                "user_id": self.cfg.bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ]

    def event_callback(self, kind, body):
        """An Events API `event_callback` for a DM or an app mention, and its (event_id, ts). The
        message joins its channel's log; files in `body` are registered (see register_files)."""
        ts = body.get("ts") or self.next_ts()
        event_id = body.get("event_id") or self.next_event_id()
        user = body.get("user") or "U0USER"
        if kind == "dm":
            # https://docs.slack.dev/reference/events/message.im
            #   "event": {"type": "message", "channel": "D024BE91L", "user": "U2147483697",
            #             "text": "Hello hello can you hear me?", "ts": "1355517523.000005",
            #             "event_ts": "1355517523.000005", "channel_type": "im"}
            channel = body.get("channel") or "D0DM"
            event = {
                "type": "message",
                "channel": channel,
                "user": user,
                "text": body.get("text", "Hello hello can you hear me?"),
                "ts": ts,
                "event_ts": ts,
                "channel_type": "im",
            }
            self.dm_channels.setdefault(user, channel)
        elif kind == "mention":
            # https://docs.slack.dev/reference/events/app_mention
            #   "event": {"type": "app_mention", "user": "U061F7AUR",
            #             "text": "<@U0LAN0Z89> is it everything a river should be?",
            #             "ts": "1515449522.000016", "channel": "C123ABC456",
            #             "event_ts": "1515449522000016"}
            mention = f"<@{self.cfg.bot_user_id}>"
            text = body.get("text", "is it everything a river should be?")
            if mention not in text:
                text = f"{mention} {text}"
            channel = body.get("channel") or "C0CHAN"
            event = {
                "type": "app_mention",
                "user": user,
                "text": text,
                "ts": ts,
                "channel": channel,
                "event_ts": ts,
            }
        else:
            raise ValueError(f"unknown event kind {kind!r}")
        files = self.register_files(body.get("files"), user)
        if files and kind == "dm":
            event.update(file_share(files))
        elif files:
            # app_mention has no subtypes; its files ride on the event itself (@slack/types
            # AppMentionEvent "files"; a captured one, bolt-js#2057: "files": [{"id": "F111"}],
            # "upload": false, "display_as_bot": false).
            event.update(files=files, upload=False, display_as_bot=False)
        if body.get("thread_ts"):
            event["thread_ts"] = body["thread_ts"]
        self.log_message(channel, self.user_message(user, event["text"], ts, body.get("thread_ts"), files))
        # Wrapper: https://docs.slack.dev/reference/events/app_mention and .../message.im
        #   {"token": "XXYYZZ", "team_id": "T123ABC456", "api_app_id": "A123ABC456",
        #    "event": {...}, "type": "event_callback", "authorizations": [...],
        #    "event_id": "Ev123ABC456", "event_time": 123456789}
        payload = {
            "token": "fake-verification-token",
            "team_id": self.cfg.team_id,
            "api_app_id": self.cfg.app_id,
            "event": event,
            "type": "event_callback",
            "authorizations": self.authorizations(),
            "event_id": event_id,
            "event_time": int(now()),
        }
        return payload, event_id, ts

    def envelope(self, kind, body):
        """A Socket Mode envelope and its (event_id, ts) (None for slash / interactive)."""
        envelope_id = str(uuid.uuid4())
        if kind in ("dm", "mention"):
            payload, event_id, ts = self.event_callback(kind, body)
            # https://docs.slack.dev/apis/events-api/using-socket-mode ("Receive events"):
            #   {"payload": <event_payload>, "envelope_id": <unique_identifier_string>,
            #    "type": <event_type_enum>, "accepts_response_payload": <bool>}
            # plus retry_attempt / retry_reason as Slack sends them on events_api envelopes
            # (a captured frame: slack-go/slack socketmode tests, "retry_attempt": 0,
            # "retry_reason": ""; slack_sdk.socket_mode.request.SocketModeRequest reads both).
            env = {
                "envelope_id": envelope_id,
                "payload": payload,
                "type": "events_api",
                "accepts_response_payload": False,
                "retry_attempt": 0,
                "retry_reason": "",
            }
            return env, event_id, ts
        if kind == "slash":
            # https://docs.slack.dev/apis/events-api/using-socket-mode ("Slash commands"): the
            # envelope's payload is the command's fields, as an HTTP request would carry them.
            payload = self.slash_command(body)
            env = {
                "payload": payload,
                "envelope_id": envelope_id,
                "type": "slash_commands",
                "accepts_response_payload": True,
            }
            return env, None, None
        if kind == "interactive":
            payload, ts = self.block_actions(body)
            env = {
                "payload": payload,
                "envelope_id": envelope_id,
                "type": "interactive",
                "accepts_response_payload": True,
            }
            return env, None, ts
        raise ValueError(f"unknown envelope kind {kind!r}")

    def slash_command(self, body):
        """A slash command's fields, for Socket Mode (the envelope's payload) and HTTP (the
        form-encoded body) alike: https://docs.slack.dev/interactivity/implementing-slash-commands,
        its example with the fake's ids (the enterprise_id / enterprise_name it shows are left out:
        the fake's workspace is no Enterprise Grid),
          token=gIkuvaNzQIHg97ATvDxqgjtO &team_id=T0001 &team_domain=example
          &channel_id=C2147483705 &channel_name=test &user_id=U2147483697 &user_name=Steve
          &command=/weather &text=94070 &response_url=https://hooks.slack.com/commands/1234/5678
          &trigger_id=13345224609.738474920.8088930838d88f008e0 &api_app_id=A123456
        (the fields @slack/bolt's SlashCommand lists too). trigger_id is new each time (Slack's
        are single-use) unless given; response_url points back at the fake."""
        self.command_counter += 1
        return {
            "token": "gIkuvaNzQIHg97ATvDxqgjtO",
            "team_id": self.cfg.team_id,
            "team_domain": "example",
            "channel_id": body.get("channel") or "C0CHAN",
            "channel_name": "test",
            "user_id": body.get("user") or "U0USER",
            "user_name": "Steve",
            "command": body.get("command") or "/pincer",
            "text": body.get("text", ""),
            "response_url": f"{self.base_url}/commands/{self.cfg.team_id}/{self.command_counter}/"
                            f"{secrets.token_urlsafe(18)}",
            "trigger_id": body.get("trigger_id")
            or f"13345224609.{738474920 + self.command_counter}.{secrets.token_hex(16)}",
            "api_app_id": self.cfg.app_id,
        }

    def block_actions(self, body):
        """A `block_actions` payload for a click on button `action_id` of message `ts`, and ts.

        https://docs.slack.dev/reference/interaction-payloads/block_actions-payload, its example
        with the fake's ids: `container` of a message (with `thread_ts` when the message is in a
        thread), `message` as the bot posted it (its blocks, when the fake has it), `actions`
        with the clicked button's `action_id`, `value` and a fresh `action_ts`.
        """
        ts = body.get("ts") or self.next_ts()
        channel = body.get("channel") or "C0CHAN"
        user = body.get("user") or "U0USER"
        posted = self.find_message(channel, ts) or {}
        thread_ts = body.get("thread_ts") or posted.get("thread_ts")
        container = {
            "type": "message",
            "message_ts": ts,
            "channel_id": channel,
            "is_ephemeral": False,
        }
        message = {
            "bot_id": self.cfg.bot_id,
            "type": "message",
            "text": posted.get("text", body.get("text", "Who if I cried out would hear me.")),
            "user": self.cfg.bot_user_id,
            "ts": ts,
        }
        if posted.get("blocks"):
            message["blocks"] = posted["blocks"]
        if thread_ts:
            container["thread_ts"] = thread_ts
            message["thread_ts"] = thread_ts
        action_id = body.get("action_id") or "WaXA"
        payload = {
            "type": "block_actions",
            "team": {"id": self.cfg.team_id, "domain": "Duino"},
            "user": {"id": user, "username": "RMR", "name": "rmr", "team_id": self.cfg.team_id},
            "api_app_id": self.cfg.app_id,
            "token": "9s8d9as89d8as9d8as989",
            "container": container,
            "trigger_id": "12321423423.333649436676.d8c1bb837935619ccad0f624c448ffb3",
            "channel": {"id": channel, "name": "review-updates"},
            "message": message,
            "response_url": "https://hooks.slack.com/actions/AABA1ABCD/1232321423432/D09sSasdasdAS9091209",
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": "pincer_actions",
                    "text": {"type": "plain_text", "text": "Button", "emoji": True},
                    "value": body.get("value") or action_id,
                    "type": "button",
                    "action_ts": body.get("action_ts") or self.next_ts(),
                }
            ],
        }
        return payload, ts

    # ---- messages and files ----------------------------------------------------------------------

    def log_message(self, channel, message):
        """Adds `message` to `channel`'s log (in place of one with the same ts), in ts order."""
        log = [m for m in self.channel_logs.get(channel, []) if m["ts"] != message["ts"]]
        log.append(message)
        log.sort(key=lambda m: ts_order(m["ts"]))
        self.channel_logs[channel] = log
        return message

    def find_message(self, channel, ts):
        return next((m for m in self.channel_logs.get(channel, []) if m["ts"] == ts), None)

    def thread_replies(self, channel, thread_ts):
        """The replies in the thread of `thread_ts`, oldest first (not the parent)."""
        return [
            m for m in self.channel_logs.get(channel, [])
            if m.get("thread_ts") == thread_ts and m["ts"] != thread_ts
        ]

    def message_view(self, channel, message):
        """`message` as conversations.history / .replies answer it: a parent with replies gets
        thread_ts, reply_count, reply_users_count, reply_users, latest_reply (and subscribed),
        a reply its parent_user_id, as https://docs.slack.dev/reference/methods/conversations.replies
        shows them:
          {"type": "message", "user": "U061F7AUR", "text": "island", "thread_ts": "1482960137.003543",
           "reply_count": 3, "subscribed": true, ..., "ts": "1482960137.003543"},
          {"type": "message", "user": "U061F7AUR", "text": "one island",
           "thread_ts": "1482960137.003543", "parent_user_id": "U061F7AUR", "ts": "1483037603.017503"}"""
        view = dict(message)
        ts, thread_ts = message["ts"], message.get("thread_ts")
        if thread_ts and thread_ts != ts:
            parent = self.find_message(channel, thread_ts)
            if parent is not None:
                view["parent_user_id"] = parent.get("user")
            return view
        replies = self.thread_replies(channel, ts)
        if replies:
            users = list(dict.fromkeys(r.get("user") for r in replies))
            view.update(
                thread_ts=ts,
                reply_count=len(replies),
                reply_users_count=len(users),
                reply_users=users,
                latest_reply=replies[-1]["ts"],
                subscribed=False,
            )
        return view

    def user_message(self, user, text, ts, thread_ts=None, files=None):
        """A person's message as history stores it (conversations.history's example:
        {"type": "message", "user": "U123ABC456", "text": "I find you punny...",
        "ts": "1512085950.000216"}); with files, the file_share message that carries them."""
        message = {"type": "message", "user": user, "text": text, "ts": ts}
        if files:
            message.update(file_share(files))
        if thread_ts:
            message["thread_ts"] = thread_ts
        return message

    def bot_message(self, text, ts, thread_ts=None, extra=None):
        """A message the bot posts, as chat.postMessage answers it
        (https://docs.slack.dev/reference/methods/chat.postMessage, "Response"):
          "message": {"text": "Here's a message for you", "username": "ecto1",
                      "bot_id": "B123ABC456", "attachments": [...], "type": "message",
                      "subtype": "bot_message", "ts": "1503435956.000247"}
        plus user / app_id / team and the thread_ts a bot token's message carries; `extra`
        (attachments, blocks, files, …) is added as is."""
        message = {
            "text": text,
            "username": "pincer",
            "bot_id": self.cfg.bot_id,
            "type": "message",
            "subtype": "bot_message",
            "ts": ts,
            "user": self.cfg.bot_user_id,
            "app_id": self.cfg.app_id,
            "team": self.cfg.team_id,
        }
        message.update(extra or {})
        if thread_ts:
            message["thread_ts"] = thread_ts
        return message

    def register_files(self, specs, user):
        """File objects for a push's `files` ([{"name", "mimetype", "content_b64" | "content",
        "title", "size", "url", "stream_bytes"}]), each kept for its url_private. ValueError
        when an entry is malformed."""
        if not specs:
            return []
        if not isinstance(specs, list) or not all(isinstance(spec, dict) for spec in specs):
            raise ValueError("files must be a list of objects")
        checked = []
        for spec in specs:
            if "content_b64" in spec:
                try:
                    data = base64.b64decode(spec["content_b64"], validate=True)
                except (binascii.Error, TypeError, ValueError) as error:
                    raise ValueError(f"files[].content_b64 is not base64: {error}")
            else:
                data = str(spec.get("content", "")).encode()
            stream = spec.get("stream_bytes")
            if stream is not None and (not isinstance(stream, int) or stream < 0):
                raise ValueError("files[].stream_bytes must be a whole number of bytes")
            fill = spec.get("stream_fill", "\0")
            if not isinstance(fill, str) or len(fill.encode()) != 1:
                raise ValueError("files[].stream_fill must be one ASCII character")
            checked.append((spec, data, stream))
        objects = []
        for spec, data, stream in checked:
            name = spec.get("name") or "file.bin"
            obj = self.file_object(
                self.next_file_id(),
                name=name,
                title=spec.get("title") or name,
                mimetype=spec.get("mimetype"),
                size=spec.get("size", stream if stream is not None else len(data)),
                user=user,
            )
            if spec.get("url"):
                obj["url_private"] = obj["url_private_download"] = spec["url"]
            self.files[obj["id"]] = {"object": obj, "data": data, "stream_bytes": stream,
                                     "stream_fill": spec.get("stream_fill", "\0").encode(),
                                     "chunked": bool(spec.get("chunked"))}
            objects.append(obj)
        return objects

    def file_object(self, file_id, *, name, title, mimetype, size, user):
        """Slack's file object, as https://docs.slack.dev/reference/methods/files.info shows it:
          {"id": "F0S43PZDF", "created": 1531763342, "timestamp": 1531763342, "name": "tedair.gif",
           "title": "tedair.gif", "mimetype": "image/gif", "filetype": "gif", "pretty_type": "GIF",
           "user": "U061F7AUR", "editable": false, "size": 137531, "mode": "hosted",
           "is_external": false, "external_type": "", "is_public": true, "public_url_shared": false,
           "display_as_bot": false, "username": "", "url_private": "https://.../tedair.gif",
           "url_private_download": "https://.../tedair.gif", ..., "permalink": "https://.../tedair.gif",
           "permalink_public": "https://.../...", ..., "has_rich_preview": false}
        with the URLs a shared file has (a captured message.im file_share event, slack-web's
        golden message_file_share.json): url_private .../files-pri/T043DB835ML-F04EEHX1EES/name,
        url_private_download .../files-pri/T043DB835ML-F04EEHX1EES/download/name."""
        created = int(now())
        filetype, pretty_type = file_kind(name)
        team_file = f"{self.cfg.team_id}-{file_id}"
        quoted = quote(name)
        return {
            "id": file_id,
            "created": created,
            "timestamp": created,
            "name": name,
            "title": title,
            "mimetype": mimetype or mimetypes.guess_type(name)[0] or "application/octet-stream",
            "filetype": filetype,
            "pretty_type": pretty_type,
            "user": user,
            "user_team": self.cfg.team_id,
            "editable": False,
            "size": size,
            "mode": "hosted",
            "is_external": False,
            "external_type": "",
            "is_public": False,
            "public_url_shared": False,
            "display_as_bot": False,
            "username": "",
            "url_private": f"{self.base_url}/files-pri/{team_file}/{quoted}",
            "url_private_download": f"{self.base_url}/files-pri/{team_file}/download/{quoted}",
            "permalink": f"{self.base_url}/files/{user}/{file_id}/{quoted}",
            "permalink_public": f"{self.base_url}/{team_file}-{secrets.token_hex(5)}",
            "has_rich_preview": False,
            "file_access": "visible",
        }

    def dm_channel(self, user):
        """The app's DM with `user`: the channel of the first DM event pushed from them, else
        "D" + the rest of their id (U0ALICE -> D0ALICE)."""
        return self.dm_channels.setdefault(user, "D" + user[1:])

    def resolve_channel(self, channel):
        """`channel`, or for a user id the app's DM with that user."""
        return self.dm_channel(channel) if is_user_id(channel) else channel

    def missing_scope(self, *accepted):
        """None if the bot token has one of the `accepted` scopes, else Slack's missing_scope
        answer, naming the first, as https://docs.slack.dev/reference/methods/admin.apps.requests.list
        documents it: {"ok": false, "error": "missing_scope", "needed": "admin.apps:read",
        "provided": "read,client,admin,identify,post,apps"}."""
        if self.scopes & set(accepted):
            return None
        return {"ok": False, "error": "missing_scope", "needed": accepted[0], "provided": self.cfg.scopes}

    # ---- Web API ---------------------------------------------------------------------------------

    def check_channel(self, channel):
        if not channel or not isinstance(channel, str):
            return False
        if channel in self.dm_channels.values():
            return True  # a DM the app has with someone is always there
        if self.channels is not None:
            return channel in self.channels
        return channel[0] in "CDG" and channel[1:].isalnum() and channel == channel.upper()

    async def web_api(self, request: web.Request):
        method = request.match_info["method"]
        arrived = now()
        raw = await request.read()
        content_type = request.content_type
        args = dict(request.query)
        body_token = args.pop("token", None)
        parse_error = None
        if raw:
            if content_type == "application/json":
                try:
                    parsed = json.loads(raw)
                    if isinstance(parsed, dict):
                        args.update(parsed)
                        # A token in a JSON body is not read: https://docs.slack.dev/apis/web-api
                        # ("JSON-encoded bodies": the token goes in the Authorization header).
                        args.pop("token", None)
                    else:
                        parse_error = "invalid_json"
                except ValueError:
                    parse_error = "invalid_json"
            else:
                form = dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
                body_token = form.pop("token", body_token)
                args.update(form)
        header_token = None
        auth = request.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            header_token = auth[7:].strip()
        token = header_token or body_token
        call = {
            "method": method,
            "http_method": request.method,
            "received_at": arrived,
            "headers": [[k, v] for k, v in request.headers.items()],
            "raw_body": raw.decode("utf-8", "replace"),
            "content_type": content_type,
            "args": args,
            "token": token,
            "token_from": "header" if header_token else ("body" if body_token else None),
            "rate_limited": False,
        }
        for key in ("channel", "channel_id", "text", "thread_ts", "ts", "mrkdwn", "name", "timestamp",
                    "status", "filename", "length"):
            if key in args:
                call[key] = args[key]
        limit = self.ratelimits.get(method)
        if limit and limit["remaining"] > 0:
            limit["remaining"] -= 1
            call["rate_limited"] = True
            # https://docs.slack.dev/apis/web-api/rate-limits: "HTTP 429 Too Many Requests" with a
            # Retry-After header of seconds; the error code is `ratelimited` ("The request has been
            # ratelimited. Refer to the Retry-After header", .../methods/chat.postMessage errors).
            answer = {"ok": False, "error": "ratelimited"}
            status, headers = 429, {"Retry-After": str(limit["retry_after"])}
        elif parse_error:
            answer, status, headers = {"ok": False, "error": parse_error}, 200, {}
        else:
            answer, status, headers = self.dispatch(method, args, token, header_token)
        call["status"] = status
        call["response"] = answer
        call["answered_at"] = now()
        self.calls.append(call)
        await self.notify()
        return web.json_response(answer, status=status, headers=headers)

    def auth(self, token, kinds):
        """None if the token is valid and of an allowed kind, else the error answer."""
        if not token:
            return {"ok": False, "error": "not_authed"}
        kind = None
        if token == self.cfg.bot_token:
            kind = "bot"
        elif token == self.cfg.app_token:
            kind = "app"
        if kind is None:
            return {"ok": False, "error": "invalid_auth"}
        if kind not in kinds:
            return {"ok": False, "error": "not_allowed_token_type"}
        return None

    def dispatch(self, method, args, token, header_token):
        handler = {
            "auth.test": self.auth_test,
            "apps.connections.open": self.connections_open,
            "chat.postMessage": self.post_message,
            "chat.update": self.update_message,
            "chat.postEphemeral": self.post_ephemeral,
            "reactions.add": self.reactions_add,
            "reactions.remove": self.reactions_remove,
            "conversations.history": self.conversations_history,
            "conversations.replies": self.conversations_replies,
            "files.getUploadURLExternal": self.files_get_upload_url,
            "files.completeUploadExternal": self.files_complete_upload,
            "assistant.threads.setStatus": self.assistant_set_status,
        }.get(method)
        if handler is None:
            return {"ok": False, "error": "unknown_method"}, 200, {}
        answer = handler(args, token, header_token)
        headers = {}
        if token == self.cfg.bot_token:
            # https://docs.slack.dev/authentication/tokens ("the x-oauth-scopes HTTP header" of
            # every Web API response lists the token's scopes, comma-separated).
            headers["x-oauth-scopes"] = self.cfg.scopes
        return answer, 200, headers

    def auth_test(self, args, token, _header):
        error = self.auth(token, ("bot", "app"))
        if error:
            return error
        if token == self.cfg.app_token:
            # Not documented (docs.slack.dev/reference/methods/auth.test gives the user-token body
            # only): an app-level token has no user, so only the app and team are said.
            return {"ok": True, "app_id": self.cfg.app_id, "team_id": self.cfg.team_id}
        # https://docs.slack.dev/reference/methods/auth.test, "Standard success response":
        #   {"ok": true, "url": "https://subarachnoid.slack.com/", "team": "Subarachnoid Workspace",
        #    "user": "grace", "team_id": "T12345678", "user_id": "W12345678"}
        # plus what a bot token adds (bot_id, is_enterprise_install; @slack/web-api
        # AuthTestResponse on docs.slack.dev lists both).
        return {
            "ok": True,
            "url": "https://fake-team.slack.com/",
            "team": "Fake Team",
            "user": "pincer",
            "team_id": self.cfg.team_id,
            "user_id": self.cfg.bot_user_id,
            "bot_id": self.cfg.bot_id,
            "is_enterprise_install": False,
        }

    def connections_open(self, args, token, header_token):
        # https://docs.slack.dev/reference/methods/apps.connections.open: app-level token, and
        # "you will need to pass this token in the HTTP Authorization header of your request;
        # passing it as a POST parameter will result in an error."
        if token and not header_token:
            return {"ok": False, "error": "not_authed"}
        error = self.auth(token, ("app",))
        if error:
            return error
        ticket = str(uuid.uuid4())
        self.tickets[ticket] = {"created_at": now(), "used_at": None}
        # Typical success response: {"ok": true,
        #   "url": "wss://wss-somethiing.slack.com/link/?ticket=12348&app_id=5678"}
        return {
            "ok": True,
            "url": f"ws://{self.host}:{self.port}/link/?ticket={ticket}&app_id={self.cfg.app_id}",
        }

    def post_message(self, args, token, _header):
        error = self.auth(token, ("bot",))
        if error:
            return error
        # https://docs.slack.dev/reference/methods/chat.postMessage: `channel` may be a user id
        # (U…/W…): the message goes to the app's DM with that user, and the answer's `channel`
        # is that DM's id (D…).
        channel = self.resolve_channel(args.get("channel"))
        if not self.check_channel(channel):
            return {"ok": False, "error": "channel_not_found"}
        text = args.get("text")
        if not text and not args.get("blocks") and not args.get("attachments"):
            return {"ok": False, "error": "no_text"}
        if text and len(text) > MAX_TEXT:
            # docs.slack.dev/reference/methods/chat.postMessage: "Slack will truncate messages
            # containing more than 40,000 characters"; the error `msg_too_long` is what Slack's
            # older reference listed for them, kept here so tests see over-long text at once.
            return {"ok": False, "error": "msg_too_long"}
        blocks, error = parsed_blocks(args)
        if error:
            return {"ok": False, "error": "invalid_blocks", "errors": [error]}
        extra = {}
        for key in ("attachments", "blocks"):
            if args.get(key):
                value = args[key]
                if isinstance(value, str):
                    try:
                        value = json.loads(value)
                    except ValueError:
                        pass
                extra[key] = value
        message = self.bot_message(text or "", self.next_ts(), args.get("thread_ts"), extra)
        self.log_message(channel, dict(message))
        self.clear_status_on_reply(channel, args.get("thread_ts"))
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": message}

    def update_message(self, args, token, _header):
        # https://docs.slack.dev/reference/methods/chat.update: channel + ts of a message; errors
        # message_not_found, cant_update_message (not the caller's), no_text, invalid_blocks.
        # "If you don't include [blocks], the message's previous blocks will be retained."
        error = self.auth(token, ("bot",))
        if error:
            return error
        channel, ts = args.get("channel"), args.get("ts")
        if not self.check_channel(channel):
            return {"ok": False, "error": "channel_not_found"}
        posted = self.find_message(channel, ts)
        if posted is None:
            return {"ok": False, "error": "message_not_found"}
        if posted.get("bot_id") != self.cfg.bot_id:
            return {"ok": False, "error": "cant_update_message"}
        text = args.get("text")
        if not text and not args.get("blocks"):
            return {"ok": False, "error": "no_text"}
        blocks, error = parsed_blocks(args)
        if error:
            return {"ok": False, "error": "invalid_blocks", "errors": [error]}
        posted["text"] = text or ""
        if "blocks" in args:
            posted["blocks"] = blocks
        # "Response": {"ok": true, "channel": "C123ABC456", "ts": "1401383885.000061",
        #              "text": "Updated text you carefully authored", "message": {...}}
        return {
            "ok": True,
            "channel": channel,
            "ts": ts,
            "text": posted["text"],
            "message": {"text": posted["text"], "user": self.cfg.bot_user_id, "blocks": posted.get("blocks")},
        }

    def post_ephemeral(self, args, token, _header):
        # https://docs.slack.dev/reference/methods/chat.postEphemeral: channel, user, text or
        # blocks; "Response": {"ok": true, "message_ts": "1502210682.580145"};
        # user_not_in_channel when the user is not a member.
        error = self.auth(token, ("bot",))
        if error:
            return error
        channel, user = args.get("channel"), args.get("user")
        if not self.check_channel(channel):
            return {"ok": False, "error": "channel_not_found"}
        if not user:
            return {"ok": False, "error": "user_not_found"}
        if user == "U0NOTHERE":
            return {"ok": False, "error": "user_not_in_channel"}
        if not args.get("text") and not args.get("blocks"):
            return {"ok": False, "error": "no_text"}
        _, error = parsed_blocks(args)
        if error:
            return {"ok": False, "error": "invalid_blocks", "errors": [error]}
        return {"ok": True, "message_ts": self.next_ts()}

    def reaction_args(self, args, token):
        error = self.auth(token, ("bot",))
        if error:
            return None, error
        channel, timestamp, name = args.get("channel"), args.get("timestamp"), args.get("name")
        # https://docs.slack.dev/reference/methods/reactions.add, errors; the doc's error body
        # is {"error": "already_reacted", "ok": false} (that key order kept).
        if not channel and not timestamp:
            return None, {"error": "no_item_specified", "ok": False}
        if not self.check_channel(channel):
            return None, {"error": "channel_not_found", "ok": False}
        if not timestamp:
            return None, {"error": "bad_timestamp", "ok": False}
        if not name:
            return None, {"error": "invalid_name", "ok": False}
        return (channel, timestamp, name.strip(":")), None

    def reactions_add(self, args, token, _header):
        key, error = self.reaction_args(args, token)
        if error:
            return error
        if key in self.reactions:
            return {"error": "already_reacted", "ok": False}
        self.reactions.add(key)
        return {"ok": True}  # reactions.add, "Typical success response"

    def reactions_remove(self, args, token, _header):
        # https://docs.slack.dev/reference/methods/reactions.remove, "Typical error response":
        #   {"error": "no_reaction", "ok": false}
        key, error = self.reaction_args(args, token)
        if error:
            return error
        if key not in self.reactions:
            return {"error": "no_reaction", "ok": False}
        self.reactions.discard(key)
        return {"ok": True}

    def history_access(self, args, token):
        """(channel, None) if the token may read `channel`'s history, else (None, the error)."""
        error = self.auth(token, ("bot",))
        if error:
            return None, error
        channel = args.get("channel")
        if not self.check_channel(channel):
            return None, {"ok": False, "error": "channel_not_found"}
        error = self.missing_scope(HISTORY_SCOPES.get(channel[0], HISTORY_SCOPES["C"]))
        return (None, error) if error else (channel, None)

    def page(self, channel, messages, args, default_limit, max_limit):
        """The `messages` (in the order served) inside oldest / latest (inclusive or not: "Include
        messages with oldest or latest timestamps in results. Ignored unless either timestamp is
        specified"), from `cursor` on, at most `limit` of them; (answer, None) or (None, error).
        Errors as conversations.history / .replies document them: invalid_ts_oldest,
        invalid_ts_latest, invalid_cursor."""
        oldest, latest = args.get("oldest"), args.get("latest")
        low = ts_value(oldest) if oldest not in (None, "") else Decimal(0)
        if low is None:
            return None, {"ok": False, "error": "invalid_ts_oldest"}
        high = ts_value(latest) if latest not in (None, "") else None
        if high is None and latest not in (None, ""):
            return None, {"ok": False, "error": "invalid_ts_latest"}
        inclusive = truthy(args.get("inclusive"))

        def inside(message):
            value = ts_value(message["ts"])
            if value is None:
                return True
            above = value >= low if inclusive else value > low
            below = high is None or (value <= high if inclusive else value < high)
            return above and below

        window = [m for m in messages if inside(m)]
        try:
            limit = int(args.get("limit") or default_limit)
        except (TypeError, ValueError):
            limit = default_limit
        limit = min(max(limit, 1), max_limit)
        start = 0
        if args.get("cursor"):
            after = ts_from_cursor(args["cursor"])
            start = next((i for i, m in enumerate(window) if m["ts"] == after), None)
            if start is None:
                return None, {"ok": False, "error": "invalid_cursor"}
        shown = window[start:start + limit]
        more = start + limit < len(window)
        answer = {"ok": True, "messages": [self.message_view(channel, m) for m in shown], "has_more": more}
        if more:
            answer["response_metadata"] = {"next_cursor": cursor_for(window[start + limit]["ts"])}
        return answer, None

    def conversations_history(self, args, token, _header):
        # https://docs.slack.dev/reference/methods/conversations.history: channel, cursor, limit
        # (default 100, "Maximum of 999"), latest, oldest, inclusive; "Typical success response":
        #   {"ok": true, "messages": [{"type": "message", "user": "U123ABC456",
        #    "text": "I find you punny and would like to smell your nose letter",
        #    "ts": "1512085950.000216"}, ...], "has_more": true, "pin_count": 0,
        #    "response_metadata": {"next_cursor": "bmV4dF90czoxNTEyMDg1ODYxMDAwNTQz"}}
        # with channel_actions_ts / channel_actions_count (required by its output schema) and
        # `latest` echoed when given ("success_with_timestamp_inclusive"). Newest first, and
        # only top-level messages: a thread's replies are conversations.replies' to show.
        channel, error = self.history_access(args, token)
        if error:
            return error
        top_level = [
            m for m in reversed(self.channel_logs.get(channel, []))
            if not m.get("thread_ts") or m["thread_ts"] == m["ts"]
        ]
        answer, error = self.page(channel, top_level, args, HISTORY_LIMIT, HISTORY_MAX)
        if error:
            return error
        answer.update(pin_count=0, channel_actions_ts=None, channel_actions_count=0)
        if args.get("latest"):
            answer["latest"] = args["latest"]
        return answer

    def conversations_replies(self, args, token, _header):
        # https://docs.slack.dev/reference/methods/conversations.replies: channel and ts ("ts
        # must be the timestamp of an existing message with 0 or more replies. If there are no
        # replies then just the single message referenced by ts will return"), cursor, limit
        # (default 1000), latest, oldest, inclusive; "Typical success response": the parent,
        # then its replies, "has_more": true, "response_metadata": {"next_cursor": ...};
        # "Typical error response": {"ok": false, "error": "thread_not_found"}.
        channel, error = self.history_access(args, token)
        if error:
            return error
        message = self.find_message(channel, args.get("ts"))
        if message is None:
            return {"ok": False, "error": "thread_not_found"}
        root = message.get("thread_ts") or message["ts"]
        parent = self.find_message(channel, root) or message
        thread = [parent] + self.thread_replies(channel, parent["ts"])
        answer, error = self.page(channel, thread, args, REPLIES_LIMIT, REPLIES_MAX)
        return error or answer

    def files_get_upload_url(self, args, token, _header):
        # https://docs.slack.dev/reference/methods/files.getUploadURLExternal: filename and
        # length required, alt_txt and snippet_type optional; errors missing_argument ("Typically
        # only occurs when the length provided is 0"), alt_txt_too_large, snippet_too_large;
        # "Typical success response":
        #   {"ok": true, "upload_url": "https://files.slack.com/upload/v1/ABC123...",
        #    "file_id": "F123ABC456"}
        error = self.auth(token, ("bot",)) or self.missing_scope("files:write")
        if error:
            return error
        for field in ("filename", "length"):
            if args.get(field) in (None, ""):
                return invalid_arguments(f"missing required field: {field}")
        try:
            length = int(args["length"])
        except (TypeError, ValueError):
            return invalid_arguments(f"{args['length']!r} is not a valid length")
        if length <= 0:
            return {"ok": False, "error": "missing_argument"}
        alt_txt, snippet_type = args.get("alt_txt"), args.get("snippet_type")
        if alt_txt and len(alt_txt) > MAX_ALT_TXT:
            return {"ok": False, "error": "alt_txt_too_large"}
        if snippet_type and length > MAX_SNIPPET:
            return {"ok": False, "error": "snippet_too_large"}
        file_id, ticket = self.next_file_id(), secrets.token_urlsafe(24)
        self.upload_tickets[ticket] = file_id
        self.uploads[file_id] = {
            "file_id": file_id,
            "name": args["filename"],
            "declared_length": length,
            "alt_txt": alt_txt,
            "snippet_type": snippet_type,
            "data": None,
            "content_type": None,
            "upload_form": None,
            "uploaded_at": None,
            "completed_at": None,
        }
        return {"ok": True, "upload_url": f"{self.base_url}/upload/v1/{ticket}", "file_id": file_id}

    def files_complete_upload(self, args, token, _header):
        # https://docs.slack.dev/reference/methods/files.completeUploadExternal: files ("Array of
        # file ids and their corresponding (optional) titles", e.g. [{"id":"F044GKUHN9Z",
        # "title":"slack-test"}]), channel_id ("If not specified the file will be private"),
        # channels, thread_ts ("make sure to provide only one channel when using
        # 'thread_ts'"), initial_comment, blocks ("If the initial_comment field is provided, the
        # blocks field is ignored"); errors file_not_found ("Could not find the file from the
        # upload ticket"), file_update_failed, channel_not_found, invalid_blocks; "Typical
        # success response": {"ok": true, "files": [{"id": "F123ABC456", "title": "slack-test"}]}
        # (here the whole file object, which has both).
        error = self.auth(token, ("bot",)) or self.missing_scope("files:write")
        if error:
            return error
        entries = args.get("files")
        if isinstance(entries, str):
            try:
                entries = json.loads(entries)
            except ValueError:
                return invalid_arguments("files is not a JSON array")
        if not isinstance(entries, list) or not entries or not all(
            isinstance(entry, dict) and entry.get("id") for entry in entries
        ):
            return invalid_arguments("files must be a non-empty array of objects with an id")
        listed = args.get("channels") or []
        if isinstance(listed, str):
            listed = listed.split(",")
        channels = [args["channel_id"]] if args.get("channel_id") else []
        channels += [c.strip() for c in listed if isinstance(c, str) and c.strip()]
        channels = [self.resolve_channel(c) for c in dict.fromkeys(channels)]
        if any(not self.check_channel(c) for c in channels):
            return {"ok": False, "error": "channel_not_found"}
        thread_ts = args.get("thread_ts") or None
        if thread_ts and len(channels) != 1:
            return invalid_arguments("thread_ts needs exactly one channel")
        comment = args.get("initial_comment")
        blocks = None
        if not comment:
            blocks, error = parsed_blocks(args)
            if error:
                return {"ok": False, "error": "invalid_blocks", "errors": [error]}
        for entry in entries:
            upload = self.uploads.get(entry["id"])
            if upload is None or upload["data"] is None or upload["completed_at"] is not None:
                why = ("no such upload" if upload is None else "nothing was uploaded to its upload_url"
                       if upload["data"] is None else "the upload was completed already")
                return {"ok": False, "error": "file_not_found",
                        "response_metadata": {"messages": [f"[ERROR] {entry['id']}: {why}"]}}
            if len(upload["data"]) != upload["declared_length"]:
                # Not documented: what Slack does with bytes whose length differs from the
                # declared `length`. The fake refuses to complete such an upload.
                return {"ok": False, "error": "file_update_failed", "response_metadata": {"messages": [
                    f"[ERROR] {entry['id']}: {len(upload['data'])} bytes were uploaded, but "
                    f"files.getUploadURLExternal declared length {upload['declared_length']}"]}}
        objects = []
        for entry in entries:
            upload = self.uploads[entry["id"]]
            obj = self.file_object(
                upload["file_id"],
                name=upload["name"],
                title=entry.get("title") or upload["name"],
                mimetype=None,
                size=len(upload["data"]),
                user=self.cfg.bot_user_id,
            )
            self.files[obj["id"]] = {"object": obj, "data": upload["data"], "stream_bytes": None}
            objects.append(obj)
        shared = []
        for channel in channels:
            extra = file_share(objects)
            if blocks:
                extra["blocks"] = blocks
            message = self.bot_message(comment or "", self.next_ts(), thread_ts, extra)
            shared.append(self.log_message(channel, message))
            self.clear_status_on_reply(channel, thread_ts)
        for obj in objects:
            self.uploads[obj["id"]].update(
                title=obj["title"],
                completed_at=now(),
                channel_id=channels[0] if channels else None,
                thread_ts=thread_ts,
                initial_comment=comment,
                message_ts=shared[0]["ts"] if shared else None,
            )
        return {"ok": True, "files": objects}

    def assistant_set_status(self, args, token, _header):
        # https://docs.slack.dev/reference/methods/assistant.threads.setStatus: channel_id,
        # thread_ts, status ("A two minute timeout applies, which will cause the status to be
        # removed if no message has been sent"; the fake does not time it out), loading_messages
        # ("Maximum of 10 messages"); scope chat:write ("accepts either the assistant:write or
        # chat:write scope for the time being", changelog 2026-03-05 "Set status method scope
        # update"); errors channel_not_found, invalid_thread_ts; "Typical success response":
        # {"ok": true}; "Typical error response for invalid channel":
        #   {"ok": false, "error": "channel_not_found", "detail": "Invalid channel_id"}
        error = self.auth(token, ("bot",)) or self.missing_scope("chat:write", "assistant:write")
        if error:
            return error
        channel, thread_ts = args.get("channel_id"), args.get("thread_ts")
        if not self.check_channel(channel):
            return {"ok": False, "error": "channel_not_found", "detail": "Invalid channel_id"}
        if ts_value(thread_ts) is None:
            return {"ok": False, "error": "invalid_thread_ts"}
        status = args.get("status")
        if not isinstance(status, str):
            return invalid_arguments("missing required field: status")
        loading = args.get("loading_messages")
        if isinstance(loading, str):
            try:
                loading = json.loads(loading)
            except ValueError:
                return invalid_arguments("loading_messages is not a JSON array")
        if loading is not None and not (
            isinstance(loading, list) and 1 <= len(loading) <= MAX_LOADING_MESSAGES
            and all(isinstance(m, str) and 1 <= len(m) <= MAX_LOADING_MESSAGE for m in loading)
        ):
            return invalid_arguments(
                f"loading_messages must be 1 to {MAX_LOADING_MESSAGES} strings of 1 to "
                f"{MAX_LOADING_MESSAGE} characters")
        if not self.cfg.assistant and channel.startswith("D"):
            # Not documented: what Slack answers when an app without the Agents & AI Apps
            # feature sets a status in a DM (an assistant thread lives there). Since 2026-03-05 a
            # status in a channel needs no AI app ("allows channel-based apps to use AI loading
            # states in channels, without ... the AI assistant split view"), so only DMs are
            # refused, with the generic `access_denied` ("Access to a resource specified in the
            # request is denied", in the method's error table) as the likeliest answer.
            return {"ok": False, "error": "access_denied"}
        self.statuses.append({
            "channel_id": channel,
            "thread_ts": thread_ts,
            "status": status,
            "loading_messages": loading,
            "cleared": status == "",
            "by": "setStatus",
            "at": now(),
        })
        return {"ok": True}

    def clear_status_on_reply(self, channel, thread_ts):
        """A bot reply in a thread ends the thread's status, recorded as a `by: "reply"` entry.
        Not verified against Slack: setStatus's reference only ties the status to the app's
        next message ("removed if no message has been sent" within two minutes); Slack's AI-app
        guides show the status going away when the app replies."""
        if not thread_ts:
            return
        last = next((s for s in reversed(self.statuses)
                     if s["channel_id"] == channel and s["thread_ts"] == thread_ts), None)
        if last is not None and not last["cleared"]:
            self.statuses.append({"channel_id": channel, "thread_ts": thread_ts, "status": "",
                                  "loading_messages": None, "cleared": True, "by": "reply", "at": now()})

    # ---- files outside the Web API ---------------------------------------------------------------

    async def upload(self, request: web.Request):
        """POST to an upload_url. https://docs.slack.dev/reference/methods/files.getUploadURLExternal:
        "Upload a file by making a POST request to the upload URL. Include the filename (e.g., -F
        filename="@text.txt")... Files can be sent as raw bytes or can be multipart form encoded.
        Slack will return HTTP 200 if the upload is successful"; its body is "OK - <length>"
        (what Slack's upload service answers; the docs say only "HTTP 200"). slack_sdk's
        files_upload_v2 sends the raw bytes labelled with urllib's default Content-Type,
        application/x-www-form-urlencoded, so only multipart/form-data is read as a form."""
        file_id = self.upload_tickets.get(request.match_info["ticket"])
        if file_id is None:
            return web.Response(status=404, text="Not Found")
        upload = self.uploads[file_id]
        if request.content_type == "multipart/form-data":
            form = await request.post()
            part = next((form[name] for name in ("file", "filename") if name in form), None)
            if part is None:
                return web.Response(status=400, text="no `file` or `filename` part")
            data = part.file.read() if isinstance(part, web.FileField) else str(part).encode()
            upload_form = "multipart"
        else:
            data = await request.read()
            upload_form = "raw"
        upload.update(data=data, content_type=request.content_type, upload_form=upload_form, uploaded_at=now())
        await self.notify()
        return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

    def download_refusal(self, request):
        """Why a file request may not have the file (None: it may). Slack's "Important Changes to
        Files in the Web API" (2015, linked from the file object's docs): "url_private and
        url_private_download currently require an authorization header with a token that has
        either the files:read or read scopes, like: Authorization: Bearer A_VALID_TOKEN"."""
        auth = request.headers.get("Authorization", "")
        if not auth.lower().startswith("bearer "):
            return "no token"
        if auth[7:].strip() != self.cfg.bot_token:
            return "invalid token"
        if "files:read" not in self.scopes:
            return "missing files:read"
        return None

    async def download(self, request: web.Request):
        """GET of a url_private / url_private_download: the bytes (or `stream_bytes` zeros,
        streamed) when authorized; recorded with what was sent and whether the client stayed."""
        file_id = request.match_info["team_file"].rpartition("-")[2]
        stored = self.files.get(file_id)
        refused = self.download_refusal(request)
        record = {
            "path": request.path,
            "file_id": file_id,
            "authorization": request.headers.get("Authorization", "").lower().startswith("bearer "),
            "auth_ok": refused is None,
            "refused": refused,
            "status": None,
            "bytes_total": 0,
            "bytes_sent": 0,
            "hung_up": False,
            "started_at": now(),
            "finished_at": None,
        }
        self.downloads.append(record)
        try:
            if refused:
                # Slack answers a file request without a valid token with its sign-in page, not
                # an error status: a 302 "Found" to https://TEAM.slack.com/?redir=%2Ffiles-pri%2F…
                # whose page is HTML with status 200 (slackapi/deno-slack-sdk#285 quotes both; the
                # docs only say the token is required). The redirect is kept, so that a client
                # following redirects sees the 200 HTML page and one that does not sees the 302.
                location = f"{self.base_url}/?redir={quote(request.path, safe='')}"
                record["status"] = 302
                return web.Response(status=302, headers={"Location": location},
                                    text=f'<a href="{location}">Found</a>.', content_type="text/html")
            if stored is None:
                record["status"] = 404
                return web.Response(status=404, text="Not Found")
            stream = stored["stream_bytes"]
            total = stream if stream is not None else len(stored["data"])
            chunks = zero_chunks(total, stored.get("stream_fill", b"\0")) if stream is not None \
                else data_chunks(stored["data"])
            record.update(status=200, bytes_total=total)
            headers = {"Content-Type": stored["object"]["mimetype"]}
            if not stored.get("chunked"):
                headers["Content-Length"] = str(total)
            response = web.StreamResponse(headers=headers)
            if stored.get("chunked"):
                response.enable_chunked_encoding()
            await response.prepare(request)
            try:
                for chunk in chunks:
                    await response.write(chunk)
                    record["bytes_sent"] += len(chunk)
                await response.write_eof()
            except ConnectionError:
                record["hung_up"] = True  # the client closed the connection mid-body
            return response
        finally:
            record["hung_up"] = record["hung_up"] or record["bytes_sent"] < record["bytes_total"]
            record["finished_at"] = now()
            asyncio.ensure_future(self.notify())

    async def sign_in_page(self, request: web.Request):
        """Where a refused file request is sent: an HTML page, 200, as Slack's sign-in page."""
        return web.Response(
            text=f'<!DOCTYPE html><html lang="en-US"><head><title>Slack</title></head><body>'
                 f'<h1>Sign in to {self.cfg.team_id}</h1></body></html>',
            content_type="text/html",
        )

    async def command_response(self, request: web.Request):
        """A POST to a slash command's response_url, recorded as a call of method "response_url"."""
        raw = await request.read()
        self.calls.append({
            "method": "response_url",
            "http_method": request.method,
            "path": request.path,
            "received_at": now(),
            "headers": [[k, v] for k, v in request.headers.items()],
            "raw_body": raw.decode("utf-8", "replace"),
            "content_type": request.content_type,
        })
        await self.notify()
        return web.Response(text="ok")

    # ---- Socket Mode ----------------------------------------------------------------------------

    def open_conns(self):
        return sorted((c for c in self.conns.values() if c.open), key=lambda c: c.id, reverse=True)

    def pick(self, body):
        wanted = body.get("connection")
        if wanted is not None:
            conn = self.conns.get(int(wanted))
            return [conn] if conn and conn.open else []
        conns = self.open_conns()
        return conns[:1]

    async def send(self, conn, frame, what):
        """Send a JSON frame unless the connection is deaf or closed; True if it went out."""
        if not conn.open:
            return False
        if conn.deaf:
            conn.frames_sent.append({"type": what, "at": now(), "swallowed": True})
            return False
        async with conn.lock:
            try:
                await conn.ws.send_str(json.dumps(frame))
            except (ConnectionError, RuntimeError, aiohttp.ClientError):
                return False
        conn.frames_sent.append({"type": what, "at": now()})
        return True

    async def link(self, request: web.Request):
        ticket = request.query.get("ticket", "")
        info = self.tickets.get(ticket)
        if info is None or info["used_at"] is not None:
            return web.json_response({"ok": False, "error": "invalid_ticket"}, status=401)
        info["used_at"] = now()
        ws = web.WebSocketResponse(autoping=False, heartbeat=None)
        await ws.prepare(request)
        self.conn_counter += 1
        conn = Conn(self.conn_counter, ws, request, ticket)
        if len(self.open_conns()) >= MAX_CONNECTIONS:
            # "Socket Mode allows your app to maintain up to 10 open WebSocket connections"
            # (docs.slack.dev/apis/events-api/using-socket-mode); past that Slack sends a
            # `too_many_websockets` disconnect (slackapi/node-slack-sdk#1762) and closes.
            conn.refused = True
            self.conns[conn.id] = conn
            await ws.send_str(
                json.dumps({"type": "disconnect", "reason": "too_many_websockets",
                            "debug_info": {"host": "applink-fake"}})
            )
            conn.frames_sent.append({"type": "disconnect:too_many_websockets", "at": now()})
            await ws.close(code=1008)
            conn.closed_at = now()
            conn.close_code = 1008
            conn.closed_by = "server"
            await self.notify()
            return ws
        self.conns[conn.id] = conn
        # https://docs.slack.dev/apis/events-api/using-socket-mode ("Connect to the WebSocket"):
        #   {"type": "hello", "connection_info": {"app_id": "A1234"}, "num_connections": 1,
        #    "debug_info": {"host": "applink-….", "started": "2020-10-11 12:12:12.120",
        #                   "build_number": 54, "approximate_connection_time": 3600}}
        hello = {
            "type": "hello",
            "connection_info": {"app_id": self.cfg.app_id},
            "num_connections": len(self.open_conns()),
            "debug_info": {
                "host": f"applink-fake-{conn.id}",
                "started": time.strftime("%Y-%m-%d %H:%M:%S.000", time.gmtime(conn.opened_at)),
                "build_number": 54,
                "approximate_connection_time": 3600,
            },
        }
        await self.send(conn, hello, "hello")
        await self.notify()
        for envelope_id in list(self.pending):
            self.pending.remove(envelope_id)
            env = self.envelopes.get(envelope_id)
            if env and env["status"] == "waiting":
                await self.deliver(env, conn)
        try:
            async for msg in ws:
                conn.frames_received += 1
                if msg.type == aiohttp.WSMsgType.PING:
                    conn.pings.append(now())
                    if not conn.deaf:
                        await ws.pong(msg.data)
                elif msg.type == aiohttp.WSMsgType.PONG:
                    conn.pongs.append(now())
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    await self.on_text(conn, msg.data)
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    self.protocol_error(conn, repr(msg.data[:200]), "binary frame")
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
        self.protocol_errors.append(
            {"connection": conn.id, "received_at": now(), "raw": raw, "reason": reason}
        )

    async def on_text(self, conn, data):
        arrived = now()
        try:
            frame = json.loads(data)
        except ValueError:
            self.protocol_error(conn, data, "not JSON")
            await self.notify()
            return
        envelope_id = frame.get("envelope_id") if isinstance(frame, dict) else None
        if not isinstance(envelope_id, str):
            self.protocol_error(conn, data, "no envelope_id")
            await self.notify()
            return
        extra = set(frame) - {"envelope_id", "payload"}
        env = self.envelopes.get(envelope_id)
        if env is None:
            self.protocol_error(conn, data, "unknown envelope_id")
            await self.notify()
            return
        if extra:
            self.protocol_error(conn, data, f"unexpected keys {sorted(extra)}")
        last = env["deliveries"][-1] if env["deliveries"] else None
        ack = {
            "envelope_id": envelope_id,
            "connection": conn.id,
            "received_at": arrived,
            "delay_ms": round((arrived - last["sent_at"]) * 1000, 1) if last else None,
            "retry_attempt": env["envelope"].get("retry_attempt", env["attempt"]),
            "attempt": env["attempt"],
            "payload": frame.get("payload"),
            "raw": data,
            "duplicate": env["status"] == "acked",
            "late": env["status"] != "in_flight" and env["status"] != "acked",
        }
        self.acks.append(ack)
        env["acks"].append(ack)
        if env["status"] != "acked":
            env["status"] = "acked"
            if env["timer"]:
                env["timer"].cancel()
                env["timer"] = None
            if envelope_id in self.pending:
                self.pending.remove(envelope_id)
        await self.notify()

    async def deliver(self, env, conn, half=False):
        env["envelope"]["envelope_id"] = env["id"]
        if env["envelope"].get("type") == "events_api":
            env["envelope"]["retry_attempt"] = env["attempt"]
            env["envelope"]["retry_reason"] = "timeout" if env["attempt"] else ""
        delivery = {"connection": conn.id, "sent_at": now(), "attempt": env["attempt"]}
        if half:
            data = json.dumps(env["envelope"]).encode()
            self.write_half_frame(conn, data)
            delivery["truncated"] = True
            conn.frames_sent.append({"type": f"{env['envelope']['type']}:half", "at": now()})
        else:
            sent = await self.send(conn, env["envelope"], env["envelope"]["type"])
            if not sent:
                delivery["swallowed"] = True
        env["deliveries"].append(delivery)
        env["status"] = "in_flight"
        env["conn"] = conn.id
        loop = asyncio.get_running_loop()
        env["timer"] = loop.call_later(
            self.cfg.ack_timeout, lambda: asyncio.ensure_future(self.on_timeout(env["id"], "timeout"))
        )
        await self.notify()

    def write_half_frame(self, conn, data):
        """Write a text frame header for all of `data` but only its first half, then abort."""
        n = len(data)
        if n < 126:
            head = bytes([0x81, n])
        elif n < 65536:
            head = bytes([0x81, 126]) + struct.pack("!H", n)
        else:
            head = bytes([0x81, 127]) + struct.pack("!Q", n)
        transport = conn.request.transport
        if transport is not None:
            transport.write(head + data[: n // 2])
            transport.abort()

    async def on_timeout(self, envelope_id, reason):
        env = self.envelopes.get(envelope_id)
        if env is None or env["status"] != "in_flight":
            return
        if env["timer"]:
            env["timer"].cancel()
            env["timer"] = None
        env["deliveries"][-1]["unacked"] = reason
        # Socket Mode retries an unacked envelope ("Your app still needs to acknowledge receiving
        # each event so that Slack knows whether to retry",
        # https://docs.slack.dev/apis/events-api/using-socket-mode), as the Events API retries a
        # request not answered within 3 seconds, up to 3 times (https://docs.slack.dev/apis/events-api/,
        # "Retries": immediately, after 1 minute, after 5 minutes; that page was read here only
        # through write-ups quoting it). The fake redelivers at once, not on that schedule.
        if env["envelope"].get("type") != "events_api" or env["attempt"] >= MAX_RETRIES:
            # Only events_api envelopes are retried; an unacked slash command or interaction
            # is just reported (status "failed") as Slack shows the user an error instead.
            env["status"] = "failed"
            await self.notify()
            return
        env["attempt"] += 1
        previous = env["conn"]
        live = [c for c in self.open_conns() if not c.deaf]
        target = next((c for c in live if c.id != previous), live[0] if live else None)
        if target is None:
            env["status"] = "waiting"
            self.pending.append(envelope_id)
            await self.notify()
            return
        await self.deliver(env, target)

    async def on_closed(self, conn):
        for env in list(self.envelopes.values()):
            if env["status"] == "in_flight" and env["conn"] == conn.id:
                await self.on_timeout(env["id"], "socket closed")
        await self.notify()

    async def close_conn(self, conn, code=1001, abrupt=False):
        conn.closed_by = "server"
        if abrupt:
            transport = conn.request.transport
            if transport is not None:
                transport.abort()
        else:
            try:
                await asyncio.wait_for(conn.ws.close(code=code), timeout=2)
            except (asyncio.TimeoutError, ConnectionError, RuntimeError):
                transport = conn.request.transport
                if transport is not None:
                    transport.abort()
        if conn.closed_at is None:
            conn.closed_at = now()
            conn.close_code = None if abrupt else code
        await self.on_closed(conn)

    async def push(self, body, half=False):
        kind = body.get("kind", "dm")
        envelope, event_id, ts = self.envelope(kind, body)
        env = {
            "id": envelope["envelope_id"],
            "kind": kind,
            "envelope": envelope,
            "attempt": 0,
            "deliveries": [],
            "acks": [],
            "status": "waiting",
            "timer": None,
            "conn": None,
            "pushed_at": now(),
        }
        self.envelopes[env["id"]] = env
        targets = self.pick(body)
        if targets:
            await self.deliver(env, targets[0], half=half)
        else:
            self.pending.append(env["id"])
        return {
            "envelope_id": env["id"],
            "event_id": event_id,
            "ts": ts,
            "delivered_to": targets[0].id if targets else None,
            "files": event_files(envelope.get("payload")),
        }

    # ---- control API ----------------------------------------------------------------------------

    async def ctl_push(self, request):
        body = await json_body(request)
        try:
            return web.json_response(await self.push(body))
        except ValueError as error:
            return web.json_response({"error": str(error)}, status=400)

    async def ctl_disconnect(self, request):
        body = await json_body(request)
        reason = body.get("reason", "refresh_requested")
        close_after = body.get(
            "close_after", {"refresh_requested": 3, "link_disabled": 1}.get(reason)
        )
        sent = []
        for conn in self.pick(body):
            # https://docs.slack.dev/apis/events-api/using-socket-mode ("Handle disconnects"):
            #   {"type": "disconnect", "reason": "link_disabled" | "warning" | "refresh_requested",
            #    "debug_info": {"host": "wss-111.slack.com"}}
            frame = {"type": "disconnect", "reason": reason, "debug_info": {"host": "wss-111.slack.com"}}
            await self.send(conn, frame, f"disconnect:{reason}")
            sent.append(conn.id)
            if close_after is not None:
                asyncio.get_running_loop().call_later(
                    float(close_after),
                    lambda c=conn: asyncio.ensure_future(self.close_conn(c)) if c.open else None,
                )
        return web.json_response({"sent_to": sent, "close_after": close_after})

    async def ctl_close(self, request):
        body = await json_body(request)
        conns = self.pick(body)
        pushed = None
        if body.get("push") is not None and conns:
            push = dict(body["push"])
            push["connection"] = conns[0].id
            pushed = await self.push(push, half=bool(body.get("half")))
            if body.get("half"):
                await self.on_closed_after_abort(conns[0])
                return web.json_response({"closed": [conns[0].id], "pushed": pushed})
        for conn in conns:
            await self.close_conn(conn, code=int(body.get("code", 1001)), abrupt=bool(body.get("abrupt")))
        return web.json_response({"closed": [c.id for c in conns], "pushed": pushed})

    async def on_closed_after_abort(self, conn):
        conn.closed_by = "server"
        if conn.closed_at is None:
            conn.closed_at = now()
        await self.on_closed(conn)

    async def ctl_deaf(self, request):
        body = await json_body(request)
        on = bool(body.get("on", True))
        conns = self.pick(body) if (on or body.get("connection") is not None) else self.open_conns()
        for conn in conns:
            conn.deaf = on
        return web.json_response({"deaf": on, "connections": [c.id for c in conns]})

    async def ctl_ratelimit(self, request):
        body = await json_body(request)
        method = body.get("method", "chat.postMessage")
        self.ratelimits[method] = {
            "remaining": int(body.get("count", 1)),
            "retry_after": int(body.get("retry_after", 1)),
        }
        return web.json_response({"method": method, **self.ratelimits[method]})

    async def ctl_channels(self, request):
        body = await json_body(request)
        channels = body.get("channels")
        self.channels = set(channels) if channels is not None else None
        return web.json_response({"channels": sorted(self.channels) if self.channels else None})

    async def ctl_events_send(self, request):
        body = await json_body(request)
        url = body.get("url")
        if not url:
            return web.json_response({"error": "url is required"}, status=400)
        kind = body.get("kind", "dm")
        event_id = ts = None
        files = []
        content_type = "application/json"
        if body.get("body") is not None:
            payload_text = body["body"]
        elif kind == "interactive":
            # https://docs.slack.dev/interactivity/handling-user-interaction: "The request will be
            # made to your specified Request URL in an HTTP POST. The body of that request will
            # contain a payload parameter", form-encoded, signed as every request.
            payload, ts = self.block_actions(body)
            payload_text = urlencode({"payload": json.dumps(payload)})
            content_type = "application/x-www-form-urlencoded"
        elif kind == "slash":
            # https://docs.slack.dev/interactivity/implementing-slash-commands: "This data will be
            # sent with a Content-type header set as application/x-www-form-urlencoded", signed
            # as every request.
            payload_text = urlencode(self.slash_command(body))
            content_type = "application/x-www-form-urlencoded"
        elif kind == "url_verification":
            # https://docs.slack.dev/reference/events/url_verification:
            #   {"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
            #    "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
            #    "type": "url_verification"}
            payload_text = json.dumps(
                {
                    "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
                    "challenge": body.get(
                        "challenge", "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
                    ),
                    "type": "url_verification",
                }
            )
        else:
            try:
                payload, event_id, ts = self.event_callback(kind, body)
            except ValueError as error:
                return web.json_response({"error": str(error)}, status=400)
            payload_text = json.dumps(payload)
            files = event_files(payload)
        timestamp = int(body.get("timestamp") or now())
        if body.get("stale"):
            timestamp = int(now()) - 6 * 60
        # https://docs.slack.dev/authentication/verifying-requests-from-slack: X-Slack-Signature is
        # v0=HMAC-SHA256(signing secret, "v0:" + X-Slack-Request-Timestamp + ":" + body), made
        # here by slack_sdk's own SignatureVerifier.
        secret = self.cfg.signing_secret + ("-wrong" if body.get("bad_signature") else "")
        signature = SignatureVerifier(secret).generate_signature(
            timestamp=str(timestamp), body=payload_text
        )
        headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": str(timestamp)}
        if not body.get("no_signature"):
            headers["X-Slack-Signature"] = signature
        if body.get("retry_num") is not None:
            # https://docs.slack.dev/apis/events-api/ ("Retries", as quoted by write-ups of it):
            # X-Slack-Retry-Num and X-Slack-Retry-Reason (http_timeout, too_many_redirects,
            # connection_failed, ssl_error, http_error, unknown_error).
            headers["X-Slack-Retry-Num"] = str(body["retry_num"])
            headers["X-Slack-Retry-Reason"] = body.get("retry_reason", "http_timeout")
        record = {
            "url": url,
            "kind": kind,
            "event_id": event_id,
            "ts": ts,
            "sent": {"headers": headers, "body": payload_text, "timestamp": timestamp},
            "sent_at": now(),
            "files": files,
        }
        started = time.monotonic()
        try:
            timeout = aiohttp.ClientTimeout(total=float(body.get("timeout", 10)))
            async with aiohttp.ClientSession(timeout=timeout) as session:
                async with session.post(url, data=payload_text.encode(), headers=headers) as resp:
                    text = await resp.text()
                    record.update(
                        status=resp.status,
                        headers=[[k, v] for k, v in resp.headers.items()],
                        body=text,
                    )
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as error:
            record.update(status=None, error=type(error).__name__ + ": " + str(error))
        record["elapsed_ms"] = round((time.monotonic() - started) * 1000, 1)
        self.events_sent.append(record)
        await self.notify()
        return web.json_response(record)

    async def ctl_history_seed(self, request):
        body = await json_body(request)
        channel = self.resolve_channel(body.get("channel"))
        specs = body.get("messages") or []
        if not channel or not isinstance(specs, list) or not all(isinstance(m, dict) for m in specs):
            return web.json_response({"error": "channel and a list of messages are required"}, status=400)
        bad = [m["ts"] for m in specs if m.get("ts") is not None and ts_value(m["ts"]) is None]
        if bad:
            return web.json_response({"error": f"not Slack timestamps: {bad}"}, status=400)
        seeded = []
        for spec in specs:
            ts = spec.get("ts") or self.next_ts()
            bot = bool(spec.get("bot"))
            user = self.cfg.bot_user_id if bot else spec.get("user") or "U0USER"
            try:
                files = self.register_files(spec.get("files"), user)
            except ValueError as error:
                return web.json_response({"error": str(error), "seeded": seeded}, status=400)
            text, thread_ts = spec.get("text", ""), spec.get("thread_ts")
            if bot:
                message = self.bot_message(text, ts, thread_ts, file_share(files) if files else None)
            else:
                message = self.user_message(user, text, ts, thread_ts, files)
            self.log_message(channel, message)
            seeded.append(ts)
        return web.json_response({"channel": channel, "ts": seeded})

    async def ctl_history(self, request):
        wanted = request.query.get("channel")
        channels = [wanted] if wanted else sorted(self.channel_logs)
        return web.json_response({
            "channels": {c: [self.message_view(c, m) for m in self.channel_logs.get(c, [])] for c in channels},
            "dm_channels": self.dm_channels,
        })

    def completed_files(self):
        return [
            {
                "file_id": u["file_id"],
                "name": u["name"],
                "title": u["title"],
                "length": len(u["data"]),
                "declared_length": u["declared_length"],
                "content_b64": base64.b64encode(u["data"]).decode(),
                "sha256": hashlib.sha256(u["data"]).hexdigest(),
                "content_type": u["content_type"],
                "upload_form": u["upload_form"],
                "alt_txt": u["alt_txt"],
                "snippet_type": u["snippet_type"],
                "channel_id": u["channel_id"],
                "thread_ts": u["thread_ts"],
                "initial_comment": u["initial_comment"],
                "message_ts": u["message_ts"],
                "completed_at": u["completed_at"],
            }
            for u in self.uploads.values() if u["completed_at"] is not None
        ]

    async def ctl_files(self, request):
        pending = [
            {
                "file_id": u["file_id"],
                "name": u["name"],
                "declared_length": u["declared_length"],
                "length": None if u["data"] is None else len(u["data"]),
                "length_mismatch": u["data"] is not None and len(u["data"]) != u["declared_length"],
                "uploaded_at": u["uploaded_at"],
            }
            for u in self.uploads.values() if u["completed_at"] is None
        ]
        return web.json_response({"files": self.completed_files(), "pending": pending})

    async def ctl_downloads(self, request):
        return web.json_response({"downloads": self.downloads})

    async def ctl_status(self, request):
        return web.json_response({"statuses": self.statuses})

    async def ctl_calls(self, request):
        method = request.query.get("method")
        calls = [c for c in self.calls if method is None or c["method"] == method]
        return web.json_response({"calls": calls})

    def envelopes_view(self):
        return [
            {k: v for k, v in env.items() if k != "timer"} for env in self.envelopes.values()
        ]

    async def ctl_acks(self, request):
        return web.json_response(
            {"acks": self.acks, "envelopes": self.envelopes_view(), "protocol_errors": self.protocol_errors}
        )

    async def ctl_connections(self, request):
        return web.json_response(
            {
                "open": len(self.open_conns()),
                "connections": [c.describe() for c in sorted(self.conns.values(), key=lambda c: c.id)],
                "tickets": self.tickets,
            }
        )

    async def ctl_events_sent(self, request):
        return web.json_response({"sent": self.events_sent})

    def items(self, what, method):
        if what == "calls":
            return [c for c in self.calls if method is None or c["method"] == method]
        if what == "acks":
            return list(self.acks)
        if what == "connections":
            return [c.describe() for c in self.conns.values() if not c.refused]
        if what == "protocol_errors":
            return list(self.protocol_errors)
        if what == "events_sent":
            return list(self.events_sent)
        if what == "files":
            return self.completed_files()
        if what == "downloads":
            return [d for d in self.downloads if d["finished_at"] is not None]
        if what == "statuses":
            return list(self.statuses)
        raise ValueError(what)

    async def ctl_wait(self, request):
        q = request.query
        what = q.get("what", "calls")
        method = q.get("method")
        count = int(q.get("count", 1))
        timeout = float(q.get("timeout", 10))
        try:
            self.items(what, method)
        except ValueError:
            return web.json_response({"error": f"unknown what={what}"}, status=400)
        return await fake_control.wait_for(
            self.changed, lambda: self.items(what, method), count, timeout
        )

    async def ctl_reset(self, request):
        body = await json_body(request)
        for env in self.envelopes.values():
            if env["timer"]:
                env["timer"].cancel()
        if body.get("close_sockets"):
            for conn in self.open_conns():
                await self.close_conn(conn)
        self.reset_state()
        self.conns = {cid: c for cid, c in self.conns.items() if c.open}
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
    app = web.Application(client_max_size=MAX_UPLOAD)
    app.router.add_route("*", "/api/{method}", fake.web_api)
    app.router.add_get("/link/", fake.link)
    app.router.add_get("/link", fake.link)
    app.router.add_post("/_test/socket/push", fake.ctl_push)
    app.router.add_post("/_test/socket/disconnect", fake.ctl_disconnect)
    app.router.add_post("/_test/socket/close", fake.ctl_close)
    app.router.add_post("/_test/socket/deaf", fake.ctl_deaf)
    app.router.add_post("/_test/ratelimit", fake.ctl_ratelimit)
    app.router.add_post("/_test/channels", fake.ctl_channels)
    app.router.add_post("/_test/events/send", fake.ctl_events_send)
    app.router.add_get("/_test/events/sent", fake.ctl_events_sent)
    app.router.add_get("/_test/calls", fake.ctl_calls)
    app.router.add_get("/_test/acks", fake.ctl_acks)
    app.router.add_get("/_test/connections", fake.ctl_connections)
    app.router.add_get("/_test/wait", fake.ctl_wait)
    app.router.add_post("/_test/reset", fake.ctl_reset)
    app.router.add_post("/_test/history", fake.ctl_history_seed)
    app.router.add_get("/_test/history", fake.ctl_history)
    app.router.add_get("/_test/files", fake.ctl_files)
    app.router.add_get("/_test/downloads", fake.ctl_downloads)
    app.router.add_get("/_test/status", fake.ctl_status)
    app.router.add_post("/upload/v1/{ticket}", fake.upload)
    app.router.add_get("/files-pri/{team_file}/download/{name}", fake.download)
    app.router.add_get("/files-pri/{team_file}/{name}", fake.download)
    app.router.add_get("/", fake.sign_in_page)
    app.router.add_post("/commands/{rest:.*}", fake.command_response)
    return app


def parse_args(argv=None):
    env = os.environ.get
    p = argparse.ArgumentParser(description="A local fake of Slack for pincer's tests.")
    p.add_argument("--host", default=env("FAKE_SLACK_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env("FAKE_SLACK_PORT", "0")))
    p.add_argument("--bot-token", default=env("FAKE_SLACK_BOT_TOKEN", "xoxb-fake-bot-token"))
    p.add_argument("--app-token", default=env("FAKE_SLACK_APP_TOKEN", "xapp-1-fake-app-token"))
    # Slack's documented example secret (docs.slack.dev/authentication/verifying-requests-from-slack).
    p.add_argument(
        "--signing-secret", default=env("FAKE_SLACK_SIGNING_SECRET", "8f742231b10e8888abcd99yyyzzz85a5")
    )
    p.add_argument("--team-id", default=env("FAKE_SLACK_TEAM_ID", "T0TEAM"))
    p.add_argument("--app-id", default=env("FAKE_SLACK_APP_ID", "A0APP"))
    p.add_argument("--bot-user-id", default=env("FAKE_SLACK_BOT_USER_ID", "U0BOT"))
    p.add_argument("--bot-id", default=env("FAKE_SLACK_BOT_ID", "B0BOT"))
    p.add_argument("--channels", default=env("FAKE_SLACK_CHANNELS", ""),
                   help="comma-separated known channel ids (default: any C/D/G id)")
    p.add_argument(
        "--scopes",
        default=env(
            "FAKE_SLACK_SCOPES",
            "app_mentions:read,chat:write,im:history,im:read,reactions:write",
        ),
        help="the bot token's scopes, as x-oauth-scopes reports them",
    )
    p.add_argument("--ack-timeout", type=float, default=float(env("FAKE_SLACK_ACK_TIMEOUT", "3")))
    p.add_argument(
        "--assistant",
        action="store_true",
        default=truthy(env("FAKE_SLACK_ASSISTANT", "")),
        help="the app is an AI app (Agents & AI Apps): assistant.threads.setStatus works in DMs",
    )
    args = p.parse_args(argv)
    args.channels = [c for c in args.channels.split(",") if c]
    if args.host not in LOOPBACK:
        p.error(f"--host must be a loopback address, not {args.host!r}")
    return args


async def serve(cfg):
    fake = Fake(cfg)

    def ready(port, host, base):
        fake.port, fake.host = port, host
        return {"port": port, "api_base": f"{base}/api", "control": f"{base}/_test"}

    await fake_control.serve(build_app(fake), cfg.host, cfg.port, ready, fake.shutdown)


def main() -> None:
    asyncio.run(serve(parse_args()))
    sys.exit(0)


if __name__ == "__main__":
    main()
