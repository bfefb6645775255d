"""A client of troupe's OpenAI-compatible API, written with the real `openai` package.

Run by orchestrator/tests/integration/openai_api.rs against a `troupe serve` whose model is the
mock model server: `python v1_client.py SCENARIO`, with OPENAI_BASE_URL (the server's /v1) and
OPENAI_API_KEY (the server's token) set. Each scenario checks what a client can see and prints
one JSON line with what the Rust test checks on the server's side (session ids, texts).
A failed check raises, so the process exits non-zero with the traceback.
"""

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

import openai
from openai import OpenAI

BASE = os.environ["OPENAI_BASE_URL"]
KEY = os.environ["OPENAI_API_KEY"]
# The SDK retries 429 and 5xx on its own; the checks want to see the first answer.
client = OpenAI(max_retries=0, timeout=60)


def raw(method, path, body=None, data=None, key=KEY):
    """A request outside the SDK: (status, parsed JSON body)."""
    if body is not None:
        data = json.dumps(body).encode()
    request = urllib.request.Request(BASE.rstrip("/") + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {key}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def api(method, path, body=None):
    """troupe's own API beside /v1 (approvals)."""
    root = BASE.rstrip("/").removesuffix("/v1")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(root + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {KEY}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def chat(messages, **extra):
    """A whole answer and the session that gave it."""
    raw_response = client.chat.completions.with_raw_response.create(
        model="troupe/helper", messages=messages, **extra
    )
    return raw_response.parse(), raw_response.headers.get("x-troupe-session")


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def models():
    listed = client.models.list()
    ids = {m.id: m for m in listed.data}
    check("troupe" in ids and "troupe/helper" in ids, f"models listed: {sorted(ids)}")
    check(ids["troupe"].model_extra.get("context_length") == 32768, f"context: {ids['troupe']}")
    one = client.models.retrieve("troupe/helper")
    check(one.id == "troupe/helper", f"retrieved {one}")
    return {"models": sorted(ids)}


def plain():
    answer, session = chat([{"role": "user", "content": "please say hello"}])
    choice = answer.choices[0]
    check(choice.message.content == "Hello from troupe.", f"content: {choice.message}")
    check(choice.finish_reason == "stop", f"finish: {choice.finish_reason}")
    check(answer.usage.total_tokens > 0, f"usage: {answer.usage}")
    check(answer.object == "chat.completion", answer.object)
    check(session, "the answer names its session")
    return {"session": session, "usage": answer.usage.total_tokens}


def stream():
    pieces, finish, usage, roles = [], None, None, []
    events = client.chat.completions.create(
        model="troupe/helper",
        messages=[{"role": "user", "content": "stream please"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in events:
        check(chunk.object == "chat.completion.chunk", chunk.object)
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    text = "".join(pieces)
    check(text == "Streaming words arrive one by one.", f"streamed: {pieces}")
    check(len(pieces) > 1, f"the text came in pieces: {pieces}")
    check(roles == ["assistant"], f"roles: {roles}")
    check(finish == "stop", f"finish: {finish}")
    check(usage is not None and usage.total_tokens > 0, f"usage: {usage}")
    return {"text": text}


def history():
    first = [
        {"role": "system", "content": "Answer in one line."},
        {"role": "user", "content": "remember kiwi"},
    ]
    answer, session = chat(first)
    check(answer.choices[0].message.content == "I will remember kiwi.", f"{answer}")
    second = first + [
        {"role": "assistant", "content": answer.choices[0].message.content},
        {"role": "user", "content": "which fruit was it?"},
    ]
    answer2, session2 = chat(second)
    check(answer2.choices[0].message.content == "The fruit was kiwi.", f"{answer2}")
    check(session2 == session, f"the history continued {session}, not {session2}")
    # Named by the header, with only the new message.
    answer3, session3 = chat(
        [{"role": "user", "content": "and once more"}],
        extra_headers={"X-Troupe-Session": session},
    )
    check(answer3.choices[0].message.content == "Still kiwi.", f"{answer3}")
    check(session3 == session, f"the header continued {session}, not {session3}")
    # A history troupe never gave starts a new session.
    other, session4 = chat(
        [
            {"role": "user", "content": "remember kiwi"},
            {"role": "assistant", "content": "something troupe never said"},
            {"role": "user", "content": "which fruit was it?"},
        ]
    )
    check(session4 != session, "an unknown history opens a new session")
    return {"session": session, "other": session4}


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def client_tool():
    messages = [{"role": "user", "content": "what is the weather in Paris?"}]
    answer, session = chat(messages, tools=[WEATHER])
    choice = answer.choices[0]
    check(choice.finish_reason == "tool_calls", f"finish: {choice}")
    calls = choice.message.tool_calls
    check(len(calls) == 1 and calls[0].function.name == "get_weather", f"calls: {calls}")
    check(json.loads(calls[0].function.arguments) == {"city": "Paris"}, f"{calls[0]}")
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": "sunny-21C"})
    answer2, session2 = chat(messages, tools=[WEATHER])
    check(answer2.choices[0].message.content == "Paris is sunny at 21C.", f"{answer2}")
    check(answer2.choices[0].finish_reason == "stop", f"{answer2}")
    check(session2 == session, f"the results went on in {session}, not {session2}")
    return {"session": session, "call_id": calls[0].id}


def client_tool_stream():
    messages = [{"role": "user", "content": "what is the weather in Paris?"}]
    calls, finish = {}, None
    for chunk in client.chat.completions.create(
        model="troupe/helper", messages=messages, tools=[WEATHER], stream=True
    ):
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                calls[call.index] = call
            finish = choice.finish_reason or finish
    check(finish == "tool_calls", f"finish: {finish}")
    call = calls[0]
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny-21C"})
    text = []
    for chunk in client.chat.completions.create(
        model="troupe/helper", messages=messages, tools=[WEATHER], stream=True
    ):
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
    check("".join(text) == "Paris is sunny at 21C.", f"streamed: {text}")
    return {"text": "".join(text)}


def responses():
    first = client.responses.create(model="troupe/helper", input="responses hi")
    check(first.output_text == "First response.", f"{first}")
    check(first.status == "completed", first.status)
    check(first.usage.total_tokens > 0, f"{first.usage}")
    second = client.responses.create(
        model="troupe/helper", input="responses again", previous_response_id=first.id
    )
    check(second.output_text == "Second response.", f"{second}")
    check(second.previous_response_id == first.id, f"{second}")
    session = first.model_extra["troupe"]["session_id"]
    check(second.model_extra["troupe"]["session_id"] == session, "one session")
    again = client.responses.retrieve(second.id)
    check(again.output_text == "Second response.", f"{again}")
    kinds, deltas, completed = [], [], None
    for event in client.responses.create(
        model="troupe/helper",
        input="responses stream",
        previous_response_id=second.id,
        stream=True,
    ):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        if event.type == "response.completed":
            completed = event.response
    check(kinds[0] == "response.created", f"{kinds}")
    check(kinds[-1] == "response.completed", f"{kinds}")
    check("".join(deltas) == "Streamed response.", f"{deltas}")
    check(completed.output_text == "Streamed response.", f"{completed}")
    check(completed.model_extra["troupe"]["session_id"] == session, "the stream went on too")
    # A client tool through the responses API: a function_call item, then its output.
    weather = {"type": "function", **WEATHER["function"]}
    asked = client.responses.create(
        model="troupe/helper", input="what is the weather in Paris?", tools=[weather]
    )
    calls = [item for item in asked.output if item.type == "function_call"]
    check(len(calls) == 1 and calls[0].name == "get_weather", f"{asked.output}")
    check(json.loads(calls[0].arguments) == {"city": "Paris"}, f"{calls[0]}")
    answered = client.responses.create(
        model="troupe/helper",
        previous_response_id=asked.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny-21C"}],
        tools=[weather],
    )
    check(answered.output_text == "Paris is sunny at 21C.", f"{answered}")
    check(
        answered.model_extra["troupe"]["session_id"] == asked.model_extra["troupe"]["session_id"],
        "the output went on in the same session",
    )
    try:
        client.responses.create(model="troupe/helper", input="x", previous_response_id="resp_nope")
        raise AssertionError("an unknown previous_response_id was accepted")
    except openai.NotFoundError as error:
        check(error.body["param"] == "previous_response_id", f"{error.body}")
    return {"session": session}


def approval():
    """A call that needs approval: the request waits while this client approves it."""
    result = {}

    def ask():
        try:
            result["answer"] = chat([{"role": "user", "content": "print the line"}])
        except Exception as error:  # reported below, in the main thread
            result["error"] = error

    asker = threading.Thread(target=ask)
    asker.start()
    pending = []
    for _ in range(300):
        pending = api("GET", "/api/approvals")["approvals"]
        if pending:
            break
        time.sleep(0.1)
    check(pending, "the call was put in the approval queue")
    check(pending[0]["tool"] == "terminal", f"{pending}")
    check(asker.is_alive(), "the request waits while the approval is pending")
    api("POST", f"/api/approvals/{pending[0]['request_id']}", {"choice": "once"})
    asker.join(60)
    check("error" not in result, f"{result.get('error')}")
    answer, session = result["answer"]
    check(answer.choices[0].message.content == "It printed the line.", f"{answer}")
    return {"session": session, "request_id": pending[0]["request_id"]}


def errors():
    seen = {}
    try:
        client.chat.completions.create(model="troupe/nope", messages=[{"role": "user", "content": "x"}])
        raise AssertionError("unknown model accepted")
    except openai.NotFoundError as error:
        check(error.status_code == 404, error)
        check(error.body["code"] == "model_not_found" and error.body["param"] == "model", f"{error.body}")
        check(error.body["type"] == "invalid_request_error", f"{error.body}")
        seen["unknown_model"] = error.status_code
    status, body = raw("POST", "/chat/completions", data=b"{not json")
    check(status == 400 and body["error"]["code"] == "bad_json", f"{status} {body}")
    check(set(body["error"]) == {"message", "type", "param", "code"}, f"{body}")
    seen["bad_json"] = status
    status, body = raw("POST", "/chat/completions", {"model": "troupe", "messages": "hi"})
    check(status == 400 and body["error"]["param"] == "messages", f"{status} {body}")
    check(body["error"]["code"] == "invalid_type", f"{body}")
    seen["wrong_type"] = status
    status, body = raw(
        "POST",
        "/chat/completions",
        {"model": "troupe", "messages": [{"role": "user", "content": "x"}], "stream": "yes"},
    )
    check(status == 400 and body["error"]["param"] == "stream", f"{status} {body}")
    status, body = raw(
        "POST",
        "/chat/completions",
        {"model": "troupe", "messages": [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]},
    )
    check(status == 413 and body["error"]["code"] == "request_too_large", f"{status} {body}")
    seen["too_large"] = status
    status, body = raw("GET", "/no-such-route")
    check(status == 404 and body["error"]["type"] == "invalid_request_error", f"{status} {body}")
    try:
        OpenAI(api_key="not-the-token-0123456789", max_retries=0).models.list()
        raise AssertionError("a wrong key was accepted")
    except openai.AuthenticationError as error:
        check(error.status_code == 401 and error.body["type"] == "authentication_error", f"{error.body}")
        seen["unauthorized"] = error.status_code
    # Busy: a second request to a session still working on the first.
    _, session = chat([{"role": "user", "content": "please say hello"}])
    slow = threading.Thread(
        target=lambda: chat(
            [{"role": "user", "content": "a slow one"}], extra_headers={"X-Troupe-Session": session}
        )
    )
    slow.start()
    time.sleep(1.0)
    try:
        chat([{"role": "user", "content": "please say hello"}], extra_headers={"X-Troupe-Session": session})
        raise AssertionError("a busy session took a second request")
    except openai.RateLimitError as error:
        check(error.status_code == 429 and error.body["code"] == "session_busy", f"{error.body}")
        seen["busy"] = error.status_code
    slow.join(60)
    try:
        chat([{"role": "user", "content": "x"}], extra_headers={"X-Troupe-Session": "no-such-session"})
        raise AssertionError("an unknown session was accepted")
    except openai.NotFoundError as error:
        seen["unknown_session"] = error.status_code
    return seen


def server_full():
    """The server holds as many sessions as it may: a new conversation is answered 503."""
    chat([{"role": "user", "content": "please say hello"}])
    try:
        chat([{"role": "user", "content": "please say hello"}])
        raise AssertionError("a session past serve.max_sessions was opened")
    except openai.InternalServerError as error:
        check(error.status_code == 503 and error.body["code"] == "server_busy", f"{error.body}")
        return {"status": error.status_code}


def disconnect():
    """A streaming client that goes away mid-answer: troupe stops the turn."""
    stream = client.chat.completions.create(
        model="troupe/helper",
        messages=[{"role": "user", "content": "a very slow one"}],
        stream=True,
    )
    session = stream.response.headers.get("x-troupe-session")
    first = next(iter(stream))
    check(first.choices[0].delta.role == "assistant", f"{first}")
    # The client goes away mid-answer: the process ends with the connection open (closing the
    # SDK's stream politely would read the rest of the answer first).
    print(json.dumps({"session": session}), flush=True)
    os._exit(0)


SCENARIOS = {f.__name__: f for f in [
    models, plain, stream, history, client_tool, client_tool_stream, responses, approval, errors,
    server_full, disconnect,
]}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]]()), flush=True)
