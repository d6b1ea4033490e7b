"""Drives pincer's gateway with the official `openai` and `anthropic` clients.

Usage: gateway_clients.py BASE_URL API_KEY
Prints one JSON object with what each call returned; the Rust test asserts on it.
"""

import json
import sys

import anthropic
import openai


def main() -> None:
    base, key = sys.argv[1], sys.argv[2]
    out = {}
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)

    out["models"] = sorted(m.id for m in client.models.list().data)

    chat = client.chat.completions.with_raw_response.create(
        model="default", messages=[{"role": "user", "content": "Say hello"}]
    )
    out["chat_deployment"] = chat.headers.get("x-pincer-deployment")
    parsed = chat.parse()
    out["chat"] = parsed.choices[0].message.content
    out["chat_usage"] = [parsed.usage.prompt_tokens, parsed.usage.completion_tokens]

    stream = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Say hello"}],
        stream=True,
    )
    out["stream"] = "".join(
        chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
    )

    tool = client.chat.completions.create(
        model="tools",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                    },
                },
            }
        ],
    )
    call = tool.choices[0].message.tool_calls[0]
    out["tool"] = [call.function.name, json.loads(call.function.arguments)]
    out["tool_finish"] = tool.choices[0].finish_reason

    try:
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}]
        )
    except openai.NotFoundError as e:
        out["unknown_model"] = [e.status_code, e.body.get("code") if isinstance(e.body, dict) else None]

    claude = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)
    message = claude.messages.create(
        model="default",
        max_tokens=64,
        messages=[{"role": "user", "content": "Say hello"}],
    )
    out["anthropic"] = message.content[0].text
    out["anthropic_usage"] = [message.usage.input_tokens, message.usage.output_tokens]
    with claude.messages.stream(
        model="default",
        max_tokens=64,
        messages=[{"role": "user", "content": "Say hello"}],
    ) as s:
        out["anthropic_stream"] = "".join(s.text_stream)

    print(json.dumps(out))


if __name__ == "__main__":
    main()
