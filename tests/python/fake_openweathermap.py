"""A local OpenWeatherMap "Current weather data" API for the weather skills'
tests: `GET /data/2.5/weather?q=CITY&units=UNITS&appid=KEY`.

Answers are built from the example OpenWeatherMap documents for this call
(Zocca, IT, in standard units: Kelvin and m/s), converted for `units` the
way the API does (metric: °C; imperial: °F and miles/hour). Errors are the
documented ones: 401 `{"cod":401,"message":"Invalid API key. …"}` for a
wrong key and 404 `{"cod":"404","message":"city not found"}` for a city it
does not know.

Prints one ready line, `{"port", "base", "control"}`; the control API
under `/_test`: `GET /_test/requests` (every weather request: path and
query), `POST /_test/fail {"status": N}` (answer N to every weather request
until `{"status": null}`).

    python fake_openweathermap.py --key KEY
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

# The documented example response (standard units).
ZOCCA = {
    "coord": {"lon": 10.99, "lat": 44.34},
    "weather": [{"id": 501, "main": "Rain", "description": "moderate rain", "icon": "10d"}],
    "base": "stations",
    "main": {
        "temp": 298.48,
        "feels_like": 298.74,
        "temp_min": 297.56,
        "temp_max": 300.05,
        "pressure": 1015,
        "humidity": 64,
        "sea_level": 1015,
        "grnd_level": 933,
    },
    "visibility": 10000,
    "wind": {"speed": 0.62, "deg": 349, "gust": 1.18},
    "rain": {"1h": 3.16},
    "clouds": {"all": 100},
    "dt": 1661870592,
    "sys": {"type": 2, "id": 2075663, "country": "IT", "sunrise": 1661834187, "sunset": 1661882248},
    "timezone": 7200,
    "id": 3163858,
    "name": "Zocca",
    "cod": 200,
}

CITIES = {"zocca": ZOCCA, "zocca,it": ZOCCA}


def converted(report, units):
    out = json.loads(json.dumps(report))
    if units in ("metric", "imperial"):
        for key in ("temp", "feels_like", "temp_min", "temp_max"):
            celsius = out["main"][key] - 273.15
            value = celsius if units == "metric" else celsius * 9 / 5 + 32
            out["main"][key] = round(value, 2)
    if units == "imperial":
        for key in ("speed", "gust"):
            out["wind"][key] = round(out["wind"][key] * 2.23694, 2)
    return out


class State:
    def __init__(self, key):
        self.key = key
        self.lock = threading.Lock()
        self.requests = []
        self.fail = None


def handler(state):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send_json(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json; charset=utf-8")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            url = urlsplit(self.path)
            if url.path == "/_test/requests":
                with state.lock:
                    return self.send_json(200, state.requests)
            if url.path != "/data/2.5/weather":
                return self.send_json(404, {"cod": "404", "message": "Internal error"})
            query = parse_qs(url.query)
            with state.lock:
                state.requests.append({"path": url.path, "query": query})
                fail = state.fail
            if fail is not None:
                return self.send_json(fail, {"cod": str(fail), "message": "Internal error"})
            if query.get("appid") != [state.key]:
                return self.send_json(
                    401,
                    {
                        "cod": 401,
                        "message": "Invalid API key. Please see https://openweathermap.org/faq#error401 for more info.",
                    },
                )
            city = (query.get("q") or [""])[0].strip().lower()
            report = CITIES.get(city)
            if report is None:
                return self.send_json(404, {"cod": "404", "message": "city not found"})
            units = (query.get("units") or ["standard"])[0]
            self.send_json(200, converted(report, units))

        def do_POST(self):
            url = urlsplit(self.path)
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if url.path == "/_test/fail":
                with state.lock:
                    state.fail = body.get("status")
                return self.send_json(200, {"fail": state.fail})
            self.send_json(404, {"cod": "404", "message": "Internal error"})

    return Handler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--key", required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(State(args.key)))
    port = server.server_address[1]
    base = f"http://127.0.0.1:{port}"
    print(json.dumps({"port": port, "base": base, "control": f"{base}/_test"}), flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
