#!/usr/bin/env python3
"""Serve a local GGUF model behind llama.cpp's OpenAI-compatible HTTP server.

Run it with the venv that setup.sh makes:

    ~/.cache/troupe-llm/venv/bin/python scripts/llm/serve.py --port 8088

It binds to 127.0.0.1 only. Once the model is loaded and /health answers, it
prints one line to stdout, `URL http://127.0.0.1:PORT/v1`, then stays up until
it gets SIGINT or SIGTERM. With --port 0 a free port is picked and printed.

By default the Qwen models are served with qwen-bare-json.jinja (next to this
file) instead of the chat template inside the GGUF: these Qwen2.5-Coder models
ignore the <tool_call> tags that their own template asks for and answer with a
bare JSON object, which llama.cpp only turns into `tool_calls` when the template
renders calls the same way. See README.md.
"""
import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.expanduser(os.environ.get("TROUPE_LLM_HOME", "~/.cache/troupe-llm"))
MODELS = {
    "1.5b": ("qwen2.5-coder-1.5b-instruct", os.path.join(CACHE, "models", "qwen2.5-coder-1.5b-instruct-q4km.gguf")),
    "0.5b": ("qwen2.5-coder-0.5b-instruct", os.path.join(CACHE, "models", "qwen2.5-coder-0.5b-instruct-q4km.gguf")),
}
TOOL_TEMPLATE = os.path.join(HERE, "qwen-bare-json.jinja")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=8088, help="TCP port on 127.0.0.1; 0 picks a free one (default 8088)")
    ap.add_argument("--model", default="1.5b", help="'1.5b' (default), '0.5b' or a path to a .gguf file")
    ap.add_argument("--ctx", type=int, default=8192, help="context size in tokens (default 8192)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2,
                    help="CPU threads for prompt processing and generation (default: all cores)")
    ap.add_argument("--parallel", type=int, default=1,
                    help="concurrent request slots; the context is split among them (default 1)")
    tmpl = ap.add_mutually_exclusive_group()
    tmpl.add_argument("--chat-template-file", default=None,
                      help="Jinja chat template to use (default for the Qwen models: qwen-bare-json.jinja)")
    tmpl.add_argument("--gguf-template", action="store_true",
                      help="use the chat template inside the GGUF (tool calls then arrive as JSON text in content)")
    ap.add_argument("--alias", default=None, help="model id reported by /v1/models")
    ap.add_argument("--verbose", action="store_true", help="llama.cpp's own log on stderr")
    ap.add_argument("--verbosity", type=int, default=None,
                    help="llama.cpp log level with --verbose (default 3; 4 and up show the chat parser's debug log)")
    args = ap.parse_args()

    import xllamacpp as xlc

    alias, path = MODELS.get(args.model, (None, args.model))
    if not os.path.isfile(path):
        print(f"model file not found: {path} (run scripts/llm/setup.sh)", file=sys.stderr)
        return 2
    template_file = args.chat_template_file
    if template_file is None and not args.gguf_template and args.model in MODELS:
        template_file = TOOL_TEMPLATE
    port = args.port or free_port()

    p = xlc.CommonParams()
    p.model.path = path
    p.n_ctx = args.ctx
    p.n_parallel = args.parallel
    p.use_jinja = True
    p.port = port
    p.hostnames = ["127.0.0.1"]
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.model_alias = {args.alias or alias or os.path.basename(path)}
    if template_file:
        with open(template_file, encoding="utf-8") as f:
            p.chat_template = f.read()
    if not args.verbose:
        p.verbosity = -1  # quiet; errors still go to stderr
    elif args.verbosity is not None:
        p.verbosity = args.verbosity

    t0 = time.monotonic()
    server = xlc.Server(p)  # starts the HTTP server on its own threads
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200 and json.load(r).get("status") == "ok":
                    break
        except Exception:
            pass
        if time.monotonic() > deadline:
            print("server did not become healthy within 300 s", file=sys.stderr)
            os._exit(1)
        time.sleep(0.1)
    print(f"loaded {os.path.basename(path)} in {time.monotonic() - t0:.1f}s"
          f" (template: {os.path.basename(template_file) if template_file else 'from GGUF'})", file=sys.stderr)
    print(f"URL {base}/v1", flush=True)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
    del server
    os._exit(0)  # the embedded server's threads don't join cleanly; exit at once


if __name__ == "__main__":
    sys.exit(main())
