"""A local fake of Slack for pincer's end-to-end tests: Web API, Socket Mode, Events API sender.

Usage: fake_slack.py [--host 127.0.0.1] [--port 0] [--bot-token xoxb-...] [--app-token xapp-...]
                     [--signing-secret S] [--team-id T0TEAM] [--app-id A0APP] [--bot-user-id U0BOT]
                     [--bot-id B0BOT] [--channels C1,D2] [--ack-timeout 3]
                     [--scopes app_mentions:read,chat:write,...]
Every flag can also be given by environment: FAKE_SLACK_BOT_TOKEN, FAKE_SLACK_APP_TOKEN,
FAKE_SLACK_SIGNING_SECRET, FAKE_SLACK_TEAM_ID, FAKE_SLACK_APP_ID, FAKE_SLACK_BOT_USER_ID,
FAKE_SLACK_BOT_ID, FAKE_SLACK_CHANNELS, FAKE_SLACK_ACK_TIMEOUT, FAKE_SLACK_SCOPES (flags win).
Web API answers to the bot token carry `x-oauth-scopes` (the --scopes list), as Slack's do.

Serves on loopback only. When ready it prints one JSON line to stdout,
  {"port": N, "api_base": "http://127.0.0.1:N/api", "control": "http://127.0.0.1:N/_test"}
and serves until killed (SIGTERM or SIGINT: exit 0).

Web API, `POST|GET /api/<method>`, form-encoded or JSON bodies; the token is read from
`Authorization: Bearer` or (form and query only, as Slack does) a `token` field. Wrong token:
`invalid_auth`, none: `not_authed`, wrong kind: `not_allowed_token_type`, all HTTP 200.
  auth.test                bot token (an app-level token is accepted too)
  apps.connections.open    app-level token, header only -> ws://HOST:N/link/?ticket=<uuid>&app_id=A0APP
  chat.postMessage         bot token; channel_not_found, no_text, msg_too_long (> 40 000 chars),
                           invalid_blocks (blocks slack_sdk's Block Kit models refuse)
  chat.update              bot token; channel + ts of a message the bot posted, else
                           message_not_found / cant_update_message; invalid_blocks as above
  chat.postEphemeral       bot token; channel + user -> {"message_ts"}; user_not_in_channel
                           when the user is "U0NOTHERE"
  reactions.add / .remove  bot token; already_reacted / no_reaction, invalid_name, no_item_specified
  anything else            {"ok": false, "error": "unknown_method"}
Every call is recorded (headers, raw body, parsed arguments, answer, arrival time).

Socket Mode, `GET /link/?ticket=...`: an unknown or used ticket gets HTTP 401; the 11th open
connection gets a `too_many_websockets` disconnect and is closed. On connect: `hello`. Envelopes
not acked (`{"envelope_id": ...}`) within --ack-timeout seconds (3, as Slack) or whose socket
dropped are redelivered on the newest live connection (the next one if none) with retry_attempt
+1 and retry_reason "timeout", at most 3 times. Other frames are recorded as protocol errors.

Control API, JSON in and out (POST bodies may be empty; `connection` defaults to the newest
open connection):
  POST /_test/socket/push        {"kind": "dm"|"mention"|"slash"|"interactive", "text", "user",
                                  "channel", "thread_ts", "event_id", "ts", "command",
                                  "action_id", "value", "action_ts", "connection"}
                                 (interactive: a click on the button `action_id` of message
                                  `ts`, a `block_actions` payload; `action_ts` new each time
                                  unless given)
                                 -> {"envelope_id", "event_id", "ts", "delivered_to"}
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
                                  method get HTTP 429, Retry-After: S, {"ok":false,"error":"ratelimited"}
  POST /_test/channels           {"channels": [ids] | null} : known channels (null: any C/D/G id)
  POST /_test/events/send        {"url", "kind": "dm"|"mention"|"url_verification"|"interactive",
                                  "text", "user", "action_id", "action_ts",
                                  "channel", "thread_ts", "event_id", "ts", "challenge", "body"
                                  (raw string sent as is), "stale": bool (timestamp 6 min old,
                                  correctly signed), "bad_signature": bool, "no_signature": bool,
                                  "timestamp": int, "retry_num": n, "retry_reason": "http_timeout",
                                  "timeout": s (10)}
                                 -> {"status", "headers", "body", "elapsed_ms", "sent": {...}}
  GET  /_test/calls?method=M     -> {"calls": [...]} every recorded Web API call (429s included)
  GET  /_test/acks               -> {"acks": [...], "envelopes": [...], "protocol_errors": [...]}
  GET  /_test/connections        -> {"open": n, "connections": [...]} with pings, frames, times
  GET  /_test/events/sent        -> {"sent": [...]} every events/send
  GET  /_test/wait?what=calls|acks|connections|protocol_errors|events_sent&method=M&count=N&timeout=S
                                 -> 200 {"count", "items"} once N are recorded, else 408
  POST /_test/reset              {"close_sockets": bool} : forget calls, acks, envelopes,
                                  reactions, rate limits, events sent, closed connections
"""

import argparse
import asyncio
import json
import os
import struct
import sys
import time
import uuid
from urllib.parse import parse_qsl, urlencode

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


def now() -> float:
    return time.time()


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
        self.ts_counter = 0
        self.event_counter = 0
        self.conn_counter = 0
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
        self.messages = {}  # (channel, ts) -> what the bot posted (text, blocks, thread_ts)
        self.ratelimits = {}
        self.events_sent = []

    # ---- ids -----------------------------------------------------------------------------------

    def next_ts(self):
        self.ts_counter += 1
        micros = 1_700_000_000 * 1_000_000 + 100 * self.ts_counter
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

    def next_event_id(self):
        self.event_counter += 1
        return f"Ev0FAKE{self.event_counter:05d}"

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
        """An Events API `event_callback` for a DM or an app mention, and its (event_id, ts)."""
        ts = body.get("ts") or self.next_ts()
        event_id = body.get("event_id") or self.next_event_id()
        user = body.get("user") or "U0USER"
        if kind == "dm":
            # https://docs.slack.dev/reference/events/message.im
            #   "event": {"type": "message", "channel": "D024BE91L", "user": "U2147483697",
            #             "text": "Hello hello can you hear me?", "ts": "1355517523.000005",
            #             "event_ts": "1355517523.000005", "channel_type": "im"}
            event = {
                "type": "message",
                "channel": body.get("channel") or "D0DM",
                "user": user,
                "text": body.get("text", "Hello hello can you hear me?"),
                "ts": ts,
                "event_ts": ts,
                "channel_type": "im",
            }
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
            event = {
                "type": "app_mention",
                "user": user,
                "text": text,
                "ts": ts,
                "channel": body.get("channel") or "C0CHAN",
                "event_ts": ts,
            }
        else:
            raise ValueError(f"unknown event kind {kind!r}")
        if body.get("thread_ts"):
            event["thread_ts"] = body["thread_ts"]
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
            # https://docs.slack.dev/apis/events-api/using-socket-mode ("Slash commands"), byte
            # for byte but for the ids, command and text.
            payload = {
                "token": "bHKJ2n9AW6Ju3MjciOHfbA1b",
                "team_id": self.cfg.team_id,
                "team_domain": "maria",
                "channel_id": body.get("channel") or "C0CHAN",
                "channel_name": "general",
                "user_id": body.get("user") or "U0USER",
                "user_name": "rainer",
                "command": body.get("command") or "/randorilke",
                "text": body.get("text", ""),
                "response_url": "https://rilke.slack.com/commands/T0SNL8S4S/37053613554/YMB2ZESDLNjNLqSFZ1quhNAh",
                "trigger_id": "37053613634.26768298162.440952c06ef4de2653466a48fe495f93",
            }
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
        posted = self.messages.get((channel, ts), {})
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

    # ---- Web API ---------------------------------------------------------------------------------

    def check_channel(self, channel):
        if not channel:
            return False
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
        for key in ("channel", "text", "thread_ts", "mrkdwn", "name", "timestamp"):
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
        channel = args.get("channel")
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
        ts = self.next_ts()
        self.messages[(channel, ts)] = {
            "text": text or "",
            "blocks": blocks,
            "thread_ts": args.get("thread_ts"),
        }
        # https://docs.slack.dev/reference/methods/chat.postMessage, "Response":
        #   {"ok": true, "channel": "C123ABC456", "ts": "1503435956.000247",
        #    "message": {"text": "Here's a message for you", "username": "ecto1",
        #                "bot_id": "B123ABC456", "attachments": [...], "type": "message",
        #                "subtype": "bot_message", "ts": "1503435956.000247"}}
        # plus user / app_id / team and the thread_ts a bot token's message carries.
        message = {
            "text": text or "",
            "username": "pincer",
            "bot_id": self.cfg.bot_id,
            "type": "message",
            "subtype": "bot_message",
            "ts": ts,
            "user": self.cfg.bot_user_id,
            "app_id": self.cfg.app_id,
            "team": self.cfg.team_id,
        }
        for key in ("attachments", "blocks"):
            if args.get(key):
                value = args[key]
                if isinstance(value, str):
                    try:
                        value = json.loads(value)
                    except ValueError:
                        pass
                message[key] = value
        if args.get("thread_ts"):
            message["thread_ts"] = args["thread_ts"]
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

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
        posted = self.messages.get((channel, ts))
        if posted is None:
            return {"ok": False, "error": "message_not_found"}
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
            "message": {"text": posted["text"], "user": self.cfg.bot_user_id, "blocks": posted["blocks"]},
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
    app = web.Application()
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
