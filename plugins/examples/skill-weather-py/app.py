"""Skill `skill-weather-py`: the current weather of a city from an
OpenWeatherMap-style API, written in Python and built with componentize-py.

The API key is a secret: the host puts it into the request as the `appid`
query parameter, so this code never sees it.
"""

import json
from urllib.parse import quote

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import config, http, types

UNITS = ("metric", "imperial")
DEFAULT_BASE_URL = "https://api.openweathermap.org"

INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {
            "type": "string",
            "description": "City name, e.g. `Paris` or `London,GB`; default: the configured default_city",
        },
        "units": {
            "type": "string",
            "enum": list(UNITS),
            "description": "metric (°C, m/s) or imperial (°F, mph); default: the configured units, else metric",
        },
    },
    "additionalProperties": False,
}


def invalid(message):
    return Err(types.ToolError_InvalidArgs(message))


def failed(message):
    return Err(types.ToolError_Failed(message))


def parse_args(args_json):
    try:
        args = json.loads(args_json or "{}")
    except ValueError as e:
        raise invalid(f"arguments are not JSON: {e}")
    if not isinstance(args, dict):
        raise invalid("arguments must be a JSON object")
    unknown = sorted(set(args) - set(INPUT_SCHEMA["properties"]))
    if unknown:
        raise invalid(f"unknown argument `{unknown[0]}`; expected city, units")
    for key in ("city", "units"):
        if key in args and not isinstance(args[key], str):
            raise invalid(f"`{key}` must be a string")
    return args


def get_weather(args):
    city = (args.get("city") or config.get("default_city") or "").strip()
    if not city:
        raise invalid("no city given and no default_city configured")
    units = args.get("units") or config.get("units") or "metric"
    if units not in UNITS:
        raise invalid(f"units must be metric or imperial, not `{units}`")
    base = (config.get("base_url") or DEFAULT_BASE_URL).rstrip("/")
    request = types.HttpRequest(
        method="GET",
        url=f"{base}/data/2.5/weather?q={quote(city)}&units={units}",
        headers=[types.Header(name="accept", value="application/json")],
        body=b"",
        timeout_ms=10_000,
        secrets=[
            types.SecretUse(
                secret="api_key", place=types.SecretPlace_QueryParam("appid")
            )
        ],
        capture=None,
    )
    try:
        response = http.fetch(request)
    except Err as e:
        raise failed(f"the weather service cannot be reached: {describe(e.value)}")
    if response.status == 404:
        raise failed(f"the weather service knows no city named `{city}`")
    if response.status == 401:
        raise failed(
            "the weather service refused the API key: check plugins.config.skill-weather-py.api_key"
        )
    if response.status != 200:
        raise failed(f"the weather service failed: HTTP {response.status}")
    try:
        data = json.loads(response.body)
        main = data["main"]
        report = {
            "city": data["name"],
            "description": data["weather"][0]["description"],
            "temperature": main["temp"],
            "feels_like": main["feels_like"],
            "humidity": main["humidity"],
            "wind_speed": data["wind"]["speed"],
            "units": units,
        }
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise failed(f"the weather service answered something unexpected: {e!r}")
    return report


def describe(error):
    value = getattr(error, "value", None)
    return f"{type(error).__name__.split('_')[-1]}: {value}" if value else type(error).__name__


class Skill(exports.Skill):
    def tools(self):
        return [
            types.ToolSpec(
                name="get_weather",
                description="The current weather of a city: temperature, feels-like, humidity, wind and a short description.",
                input_schema=json.dumps(INPUT_SCHEMA),
            )
        ]

    def invoke(self, tool, args_json):
        if tool != "get_weather":
            raise Err(types.ToolError_UnknownTool(tool))
        report = get_weather(parse_args(args_json))
        return types.ToolOutput(json=json.dumps(report))
