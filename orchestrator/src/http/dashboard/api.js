// The page's only way to the server: every call carries the bearer token kept in this tab's
// sessionStorage; a 401 anywhere signs the page out with a message saying why.

const TOKEN_KEY = "troupe.token";

export class Unauthorized extends Error {}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let onUnauthorized = () => {};

export function whenUnauthorized(handler) {
  onUnauthorized = handler;
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export async function call(method, path, body) {
  const headers = { Authorization: `Bearer ${token() || ""}` };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    onUnauthorized();
    throw new Unauthorized("the server refused the token");
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { error: { code: "not_json", message: text } };
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(response.status, error.code || "http_" + response.status, error.message || text);
  }
  return data;
}

export const get = (path) => call("GET", path);
export const post = (path, body) => call("POST", path, body === undefined ? {} : body);
export const patch = (path, body) => call("PATCH", path, body);
export const del = (path, body) => call("DELETE", path, body);

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

// Reads a Server-Sent Events stream with fetch, since EventSource cannot send the token in a
// header. Calls `onEvent({id, event, data})` per event until the stream ends or `signal` aborts;
// resolves with the last event id seen.
export async function readSse(path, after, onEvent, signal) {
  const response = await fetch(path + query({ after }), {
    headers: { Authorization: `Bearer ${token() || ""}`, Accept: "text/event-stream" },
    signal,
    cache: "no-store",
  });
  if (response.status === 401) {
    onUnauthorized();
    throw new Unauthorized("the server refused the token");
  }
  if (!response.ok || !response.body) throw new ApiError(response.status, "sse", await response.text());
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let last = after;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return last;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const event = { id: null, event: "message", data: "" };
      for (const line of block.split("\n")) {
        const colon = line.indexOf(":");
        if (colon <= 0) continue;
        const field = line.slice(0, colon);
        const val = line.slice(colon + 1).replace(/^ /, "");
        if (field === "id") event.id = Number(val);
        else if (field === "event") event.event = val;
        else if (field === "data") event.data += (event.data ? "\n" : "") + val;
      }
      if (event.id !== null) last = event.id;
      if (event.data) {
        try {
          onEvent({ ...event, data: JSON.parse(event.data) });
        } catch {
          // A keep-alive or a line we do not understand: nothing to show.
        }
      }
    }
  }
}

export function feedUrl(board, since) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  // The one place the token goes into a URL: browsers cannot set headers on a WebSocket, and
  // the API documents `?token=` for exactly this route.
  return `${scheme}//${location.host}/api/plugins/kanban/events${query({ board, since, token: token() })}`;
}
