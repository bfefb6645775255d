"""A mock OpenAI chat-completions server shared by every framework in the side-by-side bench.

It answers at once, so what a framework's turn costs beyond it is the framework's own work.
When the request offers `slow_lookup` and the last user message asks to fan out, it asks for
eight calls of it; once their results are in, or for any other request, it answers in text.
Streaming and plain replies are both served. Prints its port on the first line of stdout.
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAN_OUT_CALLS = 8


def reply_for(body):
    messages = body.get("messages") or []
    tools = [t.get("function", {}).get("name") for t in body.get("tools") or []]
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    answered = any(m.get("role") == "tool" for m in messages[last_user + 1 :])
    asks = last_user >= 0 and "fan out" in str(messages[last_user].get("content"))
    if "slow_lookup" in tools and asks and not answered:
        calls = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "slow_lookup", "arguments": json.dumps({"n": i})},
            }
            for i in range(FAN_OUT_CALLS)
        ]
        return {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"
    return {"role": "assistant", "content": "done"}, "stop"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, the second waits for the client's
    # delayed ACK (40 ms on Linux), which would swamp what the frameworks themselves cost.
    disable_nagle_algorithm = True

    def log_message(self, *_args):
        pass

    def do_GET(self):
        payload = json.dumps({"object": "list", "data": [{"id": "mock", "object": "model"}]})
        self.send(200, "application/json", payload.encode())

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self.send(400, "application/json", b'{"error":{"message":"bad json"}}')
            return
        message, finish = reply_for(body)
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        created = int(time.time())
        if body.get("stream"):
            delta = dict(message)
            if delta.get("tool_calls"):
                delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(delta["tool_calls"])]
            chunks = [
                {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage},
            ]
            out = b""
            for chunk in chunks:
                chunk.update({"id": "mock", "object": "chat.completion.chunk", "created": created, "model": "mock"})
                out += b"data: " + json.dumps(chunk).encode() + b"\n\n"
            out += b"data: [DONE]\n\n"
            self.send(200, "text/event-stream", out)
            return
        payload = {
            "id": "mock",
            "object": "chat.completion",
            "created": created,
            "model": "mock",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }
        self.send(200, "application/json", json.dumps(payload).encode())

    def send(self, status, kind, data):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Server(ThreadingHTTPServer):
    # A hundred clients connect at once; the default backlog of 5 would drop some.
    request_queue_size = 1024
    daemon_threads = True


def main():
    server = Server(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
