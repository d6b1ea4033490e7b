"""Scrapes pincer's /metrics and parses it with the official
prometheus_client OpenMetrics parser; prints the samples as JSON lines
(name, labels, value), or an error line if the text does not parse.

usage: metrics_scrape.py URL
"""
import json
import sys
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main():
    url = sys.argv[1]
    with urllib.request.urlopen(url, timeout=10) as response:
        content_type = response.headers.get("content-type", "")
        text = response.read().decode()
    samples = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.append({"name": sample.name, "labels": sample.labels, "value": sample.value})
    except Exception as e:  # the parser's verdict is the test's
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "text": text}))
        return
    print(json.dumps({"content_type": content_type, "samples": samples}))


if __name__ == "__main__":
    main()
