//! The OpenAPI 3.1 document of the HTTP API, served at `/openapi.json`. It is written here as
//! data beside the route table in `mod.rs`; a test checks that every routed (method, path) is
//! in the document and every documented one is routed.

use axum::Json;
use serde_json::{Value, json};

fn error_responses(codes: &[u16]) -> Value {
    let mut map = serde_json::Map::new();
    for code in codes {
        let text = match code {
            400 => "The request is wrong; the message says what to send instead.",
            401 => "No token, or the wrong one.",
            403 => "The token lacks the scope this route needs (the dashboard token).",
            404 => "The session, task, run, approval or board named does not exist.",
            409 => {
                "The thing exists but its state does not allow this (an invalid transition, a busy session)."
            }
            415 => "The body is not sent as application/json.",
            422 => "The JSON does not have the expected fields.",
            503 => "The server's dispatcher has stopped; restart the server.",
            _ => "Error.",
        };
        map.insert(
            code.to_string(),
            json!({"description": text, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}),
        );
    }
    Value::Object(map)
}

fn ok(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"type": "object"}}}})
}

fn body(schema: Value) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema}}})
}

fn op(summary: &str, params: Value, request: Option<Value>, status: u16, errors: &[u16]) -> Value {
    let mut responses = error_responses(errors);
    if let Value::Object(map) = &mut responses {
        map.insert(status.to_string(), ok(summary));
    }
    let mut operation = json!({"summary": summary, "parameters": params, "responses": responses});
    if let (Some(request), Value::Object(map)) = (request, &mut operation) {
        map.insert("requestBody".into(), request);
    }
    operation
}

fn path_param(name: &str, kind: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": kind}})
}

fn query(name: &str, kind: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": {"type": kind}})
}

fn board_param() -> Value {
    query(
        "board",
        "string",
        "Board slug; the server's default board when absent.",
    )
}

/// The OpenAI-compatible routes (see `http/openai`); their errors are OpenAI's shape,
/// `{"error": {"message", "type", "param", "code"}}`.
fn v1_paths() -> serde_json::Map<String, Value> {
    let openai = |summary: &str, params: Value, request: Option<Value>, errors: &[u16]| {
        op(summary, params, request, 200, errors)
    };
    let chat = json!({"type": "object", "required": ["model", "messages"], "properties": {
        "model": {"type": "string", "description": "`troupe` or `troupe/<profile>`."},
        "messages": {"type": "array", "items": {"type": "object"}},
        "stream": {"type": "boolean"},
        "tools": {"type": "array", "items": {"type": "object"}}
    }});
    let response = json!({"type": "object", "required": ["model", "input"], "properties": {
        "model": {"type": "string"},
        "input": {"description": "A string or an array of input items."},
        "previous_response_id": {"type": "string"},
        "stream": {"type": "boolean"}
    }});
    let mut paths = serde_json::Map::new();
    paths.insert("/v1/models".into(), json!({"get": openai("OpenAI-compatible: one model per profile (`troupe/<profile>`) and `troupe`, with context lengths.", json!([]), None, &[401])}));
    paths.insert("/v1/models/{*model}".into(), json!({"get": openai("OpenAI-compatible: one model.", json!([path_param("model", "string", "The model id (it may hold a slash).")]), None, &[401, 404])}));
    paths.insert("/v1/chat/completions".into(), json!({"post": openai("OpenAI-compatible: a turn of a troupe session (SSE chunks ending with `data: [DONE]` when `stream`). The answer's `X-Troupe-Session` header names the session; sending it back continues that session.", json!([]), Some(body(chat)), &[400, 401, 404, 413, 429, 503])}));
    paths.insert("/v1/responses".into(), json!({"post": openai("OpenAI-compatible responses API; `previous_response_id` continues a session.", json!([]), Some(body(response)), &[400, 401, 404, 413, 429, 503])}));
    paths.insert("/v1/responses/{id}".into(), json!({"get": openai("OpenAI-compatible: a response given earlier.", json!([path_param("id", "string", "The response id.")]), None, &[401, 404])}));
    paths
}

/// Dashboard tabs from plugins (see `http/plugin_tabs.rs`).
fn plugin_tab_paths() -> serde_json::Map<String, Value> {
    let params = json!([
        path_param(
            "plugin",
            "string",
            "The plugin's name (`achievements` for the bundled tab)."
        ),
        path_param(
            "path",
            "string",
            "The route below the plugin's prefix, as its dashboard manifest declares it."
        )
    ]);
    let summary = "A plugin tab's route. A plugin folder's route runs its program with {method, path, params, query, body} as JSON on stdin and answers what it prints. The bundled achievements plugin serves GET achievements, GET scan-status, GET recent-unlocks?limit=N, GET sessions/{id}/badges, POST rescan (202) and POST reset-state.";
    let route = op(summary, params, None, 200, &[400, 401, 404]);
    let mut paths = serde_json::Map::new();
    paths.insert("/api/dashboard/tabs".into(), json!({"get": op("The dashboard tabs plugins add: label, entry module, style sheets, routes; a tab whose manifest is broken comes with `problem` saying why.", json!([]), None, 200, &[401])}));
    paths.insert(
        "/api/plugins/{plugin}/{*path}".into(),
        json!({"get": route, "post": route, "put": route, "patch": route, "delete": route}),
    );
    paths
}

/// The whole document.
pub fn document() -> Value {
    let session_id = path_param("id", "string", "Session id.");
    let task_id = path_param("id", "string", "Task id (t_ and 8 hex digits).");
    let run_id = path_param("id", "integer", "Run id.");
    let patch_schema = json!({"$ref": "#/components/schemas/TaskPatch"});
    let mut document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "troupe HTTP API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Sessions, approvals and kanban boards of a running troupe. Every route needs `Authorization: Bearer <token>` (the web dashboard at `/`, not part of this API, does not); the WebSocket feed also accepts `?token=`. Errors are `{\"error\": {\"code\", \"message\"}}`."
        },
        "security": [{"bearer": []}],
        "paths": {
            "/openapi.json": {"get": op("This document.", json!([]), None, 200, &[401])},
            "/api/sessions": {
                "post": op("Open a session (with a scripted model, or the server's model).", json!([]), Some(body(json!({"$ref": "#/components/schemas/CreateSession"}))), 201, &[400, 401, 415, 422]),
                "get": op("The sessions opened over HTTP.", json!([]), None, 200, &[401])
            },
            "/api/sessions/{id}": {
                "get": op("One session: its path, whether a turn runs, its last outcome, its spending and its `todos` (the todo tool's list and counts).", json!([session_id]), None, 200, &[401, 404]),
                "delete": op("Close a session.", json!([session_id]), None, 200, &[401, 404])
            },
            "/api/sessions/{id}/messages": {
                "post": op("Send a user message. 202 once its turn has started (the outcome arrives as the `final` event; a failure later on arrives as a `final` event with status `failed`), 409 when the session is already busy, or 200 with the outcome when `wait` is true.", json!([session_id]), Some(body(json!({"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}, "wait": {"type": "boolean"}}, "additionalProperties": false}))), 202, &[400, 401, 404, 409, 415, 422])
            },
            "/api/sessions/{id}/events": {
                "get": {
                    "summary": "The session's events as Server-Sent Events, its subagents' included (under their own session ids): `id` is the event's number, `event` its type, `data` the event as JSON. Resumes after `Last-Event-ID` or `after`, which must be from 0 to the number of events logged (400 otherwise).",
                    "parameters": [session_id, query("after", "integer", "Send events numbered above this.")],
                    "responses": {
                        "200": {"description": "An event stream.", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                        "400": error_responses(&[400])["400"].clone(),
                        "401": error_responses(&[401])["401"].clone(),
                        "404": error_responses(&[404])["404"].clone()
                    }
                }
            },
            "/api/sessions/{id}/transcript": {
                "get": op("A stored session's messages, open or not, by its whole id: with the API token a session opened over HTTP (or one of its subagents), with the dashboard token any stored session (chat, board worker, subagent); with `tree=true` its subagents' too, parents first. 404 when the server keeps no sessions (`sessions.persist: false`) or there is no such session.", json!([session_id, query("tree", "boolean", "The subagents' conversations too.")]), None, 200, &[400, 401, 404])
            },
            "/api/sessions/{id}/approvals": {
                "get": op("Approval requests of this session (and its subagents) waiting for an answer.", json!([session_id]), None, 200, &[401, 404])
            },
            "/api/sessions/{id}/stop": {
                "post": op("Stop the running turn: `soft` (default) or `hard` (the session's subagents too). The body may be empty.", json!([session_id]), Some(json!({"required": false, "content": {"application/json": {"schema": {"type": "object", "properties": {"mode": {"enum": ["soft", "hard"]}}, "additionalProperties": false}}}})), 200, &[400, 401, 404])
            },
            "/api/store/sessions": {
                "get": op("Every stored session (chat, HTTP, board workers, subagents), newest first, one page at a time: `{sessions, next}`, `next` being the cursor of the next page (null on the last). Needs the dashboard token (`serve.dashboard_token`): the API token, shared with /v1 clients, is answered 403 `dashboard_scope_required`. With `task`, the board workers' sessions of that task's runs, each with its `run` number.", json!([query("limit", "integer", "Rows per page: 50 when absent, at most 500."), query("cursor", "string", "The next of the previous page."), query("origin", "string", "Only this origin (chat, http, worker, ...)."), query("subagents", "boolean", "Subagents' sessions too (default true)."), query("task", "string", "Only this task's runs' sessions.")]), None, 200, &[400, 401, 403, 404])
            },
            "/api/approvals": {
                "get": op("Every approval request waiting for an answer, oldest first.", json!([]), None, 200, &[401])
            },
            "/api/approvals/{request_id}": {
                "post": op("Answer an approval request, or a question (`kind: question`, from the clarify tool) with `choice: answer` and `answer` (a choice's number or text, or other words when it allows them).", json!([path_param("request_id", "string", "The request's id.")]), Some(body(json!({"type": "object", "required": ["choice"], "properties": {"choice": {"enum": ["once", "session", "always", "deny", "answer"]}, "reason": {"type": "string"}, "answer": {"type": "string"}}, "additionalProperties": false}))), 200, &[400, 401, 404, 415, 422])
            },
            "/api/plugins/kanban/boards": {
                "get": op("Every board with its task counts by status, and `default_board`, the one a request without `?board=` uses.", json!([query("include_archived", "boolean", "Archived boards too.")]), None, 200, &[400, 401]),
                "post": op("Create a board (409 when the slug is taken).", json!([]), Some(body(json!({"type": "object", "required": ["slug"], "properties": {"slug": {"type": "string"}, "name": {"type": "string"}, "description": {"type": "string"}}, "additionalProperties": false}))), 201, &[400, 401, 409, 415, 422])
            },
            "/api/plugins/kanban/board": {
                "get": op("The board: counts, open runs, the newest event id and one page of its tasks (highest priority first) by status, with `next_cursor` for the next page (null on the last).", json!([board_param(), query("tenant", "string", "Only this tenant."), query("include_archived", "boolean", "Archived tasks too."), query("limit", "integer", "Tasks per page: 500 when absent, at most 1000."), query("cursor", "string", "The next_cursor of the previous page.")]), None, 200, &[400, 401, 404])
            },
            "/api/plugins/kanban/tasks": {
                "get": op("One page of tasks, oldest first, with `next_cursor` for the next page (null on the last).", json!([board_param(), query("status", "string", "Only this status."), query("assignee", "string", "Only this assignee."), query("tenant", "string", "Only this tenant."), query("include_archived", "boolean", "Archived tasks too."), query("limit", "integer", "Tasks per page: 500 when absent, at most 1000."), query("cursor", "string", "The next_cursor of the previous page.")]), None, 200, &[400, 401, 404]),
                "post": op("Create a task (201), or get back the live task holding the same idempotency key (200).", json!([board_param()]), Some(body(json!({"$ref": "#/components/schemas/CreateTask"}))), 201, &[400, 401, 404, 409, 415, 422]),
                "delete": op("Remove tasks: each is archived (the event log keeps its history). Reported per id.", json!([board_param()]), Some(body(json!({"type": "object", "required": ["ids"], "properties": {"ids": {"type": "array", "items": {"type": "string"}}}, "additionalProperties": false}))), 200, &[400, 401, 404, 415, 422])
            },
            "/api/plugins/kanban/tasks/bulk": {
                "post": op("Apply one patch to several tasks; each id reports its own result.", json!([board_param()]), Some(body(json!({"type": "object", "required": ["ids", "patch"], "properties": {"ids": {"type": "array", "items": {"type": "string"}}, "patch": patch_schema}, "additionalProperties": false}))), 200, &[400, 401, 404, 415, 422])
            },
            "/api/plugins/kanban/tasks/{id}": {
                "get": op("A task with its comments, events, links and runs.", json!([task_id, board_param()]), None, 200, &[400, 401, 404]),
                "patch": op("Edit fields, then move to another status (`done` with summary/metadata completes it).", json!([task_id, board_param()]), Some(body(patch_schema)), 200, &[400, 401, 404, 409, 415, 422])
            },
            "/api/plugins/kanban/tasks/{id}/comments": {
                "post": op("Add a comment.", json!([task_id, board_param()]), Some(body(json!({"type": "object", "required": ["body"], "properties": {"body": {"type": "string"}, "author": {"type": "string"}}, "additionalProperties": false}))), 201, &[400, 401, 404, 415, 422])
            },
            "/api/plugins/kanban/tasks/{id}/review": {
                "post": op("A person's verdict on a task in review: `approve` (done) or `changes` with a comment saying what must change (back to ready; the next worker reads it).", json!([task_id, board_param()]), Some(body(json!({"type": "object", "required": ["verdict"], "properties": {"verdict": {"type": "string", "enum": ["approve", "changes"]}, "comment": {"type": "string"}, "author": {"type": "string"}}, "additionalProperties": false}))), 200, &[400, 401, 404, 409, 415, 422])
            },
            "/api/plugins/kanban/links": {
                "get": op("Every link of the board as `{parent_id, child_id}` pairs (archived tasks' too), for fan-out progress.", json!([board_param()]), None, 200, &[400, 401, 404]),
                "post": op("Make child_id wait for parent_id.", json!([board_param()]), Some(body(json!({"type": "object", "required": ["parent_id", "child_id"], "properties": {"parent_id": {"type": "string"}, "child_id": {"type": "string"}}, "additionalProperties": false}))), 201, &[400, 401, 404, 409, 415, 422]),
                "delete": op("Remove a link.", json!([board_param(), {"name": "parent_id", "in": "query", "required": true, "schema": {"type": "string"}}, {"name": "child_id", "in": "query", "required": true, "schema": {"type": "string"}}]), None, 200, &[400, 401, 404])
            },
            "/api/plugins/kanban/dispatch": {
                "post": op("Run one dispatch round now. With a local dispatcher (`dispatcher: \"local\"`, when troupe.yaml has profiles) the answer lists what was claimed and skipped (`claimed`, `skipped_unassigned`, `skipped_nonspawnable`, `skipped_capacity`, `skipped_cooldown`); without one (`dispatcher: \"none\"`) it lists `waiting_for_worker` and a `note` on how to add one.", json!([board_param(), query("max", "integer", "Claim at most this many."), query("dry_run", "boolean", "Change nothing; report what would happen.")]), None, 200, &[400, 401, 404, 503])
            },
            "/api/plugins/kanban/runs/{id}": {
                "get": op("One run.", json!([run_id, board_param()]), None, 200, &[400, 401, 404])
            },
            "/api/plugins/kanban/runs/{id}/terminate": {
                "post": op("End an open run: its task is blocked (kind `terminated`) and the worker loses its lease. A worker of this server's own dispatcher is stopped hard before the answer; `worker` says which: `stopped`, `stopping`, `not_running_here` or `no_local_dispatcher`.", json!([run_id, board_param()]), None, 200, &[400, 401, 404, 409])
            },
            "/api/plugins/kanban/events": {
                "get": {
                    "summary": "WebSocket feed of the board's events after `since` (live from now when absent), one JSON text message per event, oldest first. Reconnect with since=<last id seen>: nothing is skipped or repeated.",
                    "parameters": [board_param(), query("since", "integer", "The last event id seen."), query("token", "string", "The bearer token, for clients that cannot set headers.")],
                    "responses": {
                        "101": {"description": "Switching to the WebSocket protocol; each message is an Event.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Event"}}}},
                        "400": error_responses(&[400])["400"].clone(),
                        "401": error_responses(&[401])["401"].clone(),
                        "404": error_responses(&[404])["404"].clone()
                    }
                }
            }
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}
                },
                "CreateSession": {
                    "type": "object",
                    "properties": {
                        "script": {"type": "object", "description": "A scripted model: {\"turns\": [{\"text\": ..., \"tool_calls\": [{\"name\", \"arguments\"}]}]}."},
                        "toolsets": {"type": "array", "items": {"type": "string"}},
                        "system_prompt": {"type": "string"},
                        "max_iterations": {"type": "integer", "minimum": 1},
                        "profile": {"type": "string", "description": "A profile under profiles: of the server's troupe.yaml: its model, toolsets and system prompt."}
                    },
                    "additionalProperties": false
                },
                "CreateTask": {
                    "type": "object",
                    "required": ["title"],
                    "properties": {
                        "title": {"type": "string"}, "body": {"type": "string"}, "assignee": {"type": "string"},
                        "priority": {"type": "integer"}, "tenant": {"type": "string"}, "idempotency_key": {"type": "string"},
                        "parents": {"type": "array", "items": {"type": "string"}}, "triage": {"type": "boolean"},
                        "created_by": {"type": "string"}, "max_runtime_seconds": {"type": "integer", "minimum": 1, "maximum": 31536000}, "max_retries": {"type": "integer"}, "budget": {"type": "object", "additionalProperties": false, "properties": {"max_tokens": {"type": "integer", "minimum": 1}, "max_cost_usd": {"type": "number", "exclusiveMinimum": 0}, "max_wall_seconds": {"type": "number", "exclusiveMinimum": 0}}},
                        "workspace": {"type": "string", "description": "scratch (default), dir:/abs/path, worktree or worktree:<path>."}
                    },
                    "additionalProperties": false
                },
                "TaskPatch": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string"}, "body": {"type": "string"}, "priority": {"type": "integer"},
                        "tenant": {"type": "string"}, "result": {"type": "string"}, "assignee": {"type": "string", "description": "Empty unassigns."},
                        "status": {"enum": ["done", "blocked", "ready", "todo", "review", "archived"]},
                        "summary": {"type": "string"}, "metadata": {}, "reason": {"type": "string"}, "block_kind": {"type": "string"}
                    },
                    "additionalProperties": false
                },
                "Event": {
                    "type": "object",
                    "required": ["id", "kind", "payload", "created_at"],
                    "properties": {
                        "id": {"type": "integer"}, "task_id": {"type": ["string", "null"]}, "run_id": {"type": ["integer", "null"]},
                        "kind": {"type": "string"}, "payload": {"type": "object"}, "created_at": {"type": "integer", "description": "Milliseconds since the Unix epoch."}
                    }
                }
            }
        }
    });
    if let Some(paths) = document["paths"].as_object_mut() {
        paths.extend(v1_paths());
        paths.extend(plugin_tab_paths());
        paths.extend(schedule_paths());
    }
    if let Some(schemas) = document["components"]["schemas"].as_object_mut() {
        schemas.insert("JobFields".into(), job_fields_schema());
    }
    document
}

/// A scheduled job's fields, as `POST` and `PATCH /api/schedules` take them.
fn job_fields_schema() -> Value {
    json!({"type": "object", "properties": {
        "name": {"type": "string", "description": "A short name, unique on the board."},
        "owner": {"type": "string", "description": "Who owns the job (create only; default `http`)."},
        "schedule": {"type": "string", "description": "A cron expression (\"0 9 * * 1-5\"), an interval (\"every 10m\", at least 1 s) or an ISO-8601 instant."},
        "timezone": {"type": "string", "description": "IANA time zone for cron expressions; default UTC."},
        "task": {"type": "object", "required": ["title"], "properties": {
            "title": {"type": "string"}, "body": {"type": "string"}, "assignee": {"type": "string"},
            "parents": {"type": "array", "items": {"type": "string"}}}},
        "prompt": {"type": "string", "description": "Instead of `task`: a prompt answered by `profile`."},
        "profile": {"type": "string"},
        "missed": {"enum": ["skip", "run_once"]},
        "until": {"type": "string", "description": "No run after this ISO-8601 instant."},
        "max_runs": {"type": "integer", "minimum": 1}
    }})
}

/// The scheduled-jobs routes.
fn schedule_paths() -> serde_json::Map<String, Value> {
    let job_id = path_param(
        "id",
        "string",
        "The job's id (j_ and 8 hex digits) or name.",
    );
    let fields = body(json!({"$ref": "#/components/schemas/JobFields"}));
    let mut paths = serde_json::Map::new();
    paths.insert("/api/schedules".into(), json!({
        "get": op("The board's scheduled jobs: id, name, schedule, state, next run, last outcome.", json!([board_param()]), None, 200, &[400, 401, 404]),
        "post": op("Make a scheduled job; bad cron expressions, time zones, intervals and unknown profiles are 400s that say what to send instead.", json!([board_param()]), Some(fields.clone()), 201, &[400, 401, 404, 409])
    }));
    paths.insert("/api/schedules/{id}".into(), json!({
        "get": op("One job.", json!([job_id.clone(), board_param()]), None, 200, &[400, 401, 404]),
        "patch": op("Change a job (only the fields sent); a new schedule counts from now.", json!([job_id.clone(), board_param()]), Some(fields), 200, &[400, 401, 404, 409]),
        "delete": op("Remove a job and its history (its tasks stay).", json!([job_id.clone(), board_param()]), None, 200, &[400, 401, 404])
    }));
    for (path, summary) in [
        ("/api/schedules/{id}/pause", "Pause a job."),
        (
            "/api/schedules/{id}/resume",
            "Resume a job, counting from now.",
        ),
        (
            "/api/schedules/{id}/run",
            "Run a job now, by hand; its schedule is not moved.",
        ),
    ] {
        paths.insert(path.into(), json!({"post": op(summary, json!([job_id.clone(), board_param()]), None, 200, &[400, 401, 404])}));
    }
    paths.insert("/api/schedules/{id}/history".into(), json!({
        "get": op("A job's runs, newest first: due, fired, kind, the task made and its outcome.", json!([job_id, board_param(), query("limit", "integer", "Most runs returned (default 50).")]), None, 200, &[400, 401, 404])
    }));
    paths
}

/// Every `(method, path)` the document lists, methods in lower case.
pub fn documented_routes(document: &Value) -> Vec<(String, String)> {
    let mut routes = Vec::new();
    if let Some(paths) = document["paths"].as_object() {
        for (path, item) in paths {
            if let Some(item) = item.as_object() {
                for method in item.keys() {
                    routes.push((method.clone(), path.clone()));
                }
            }
        }
    }
    routes
}

/// Handler of `GET /openapi.json`.
pub async fn serve_document() -> Json<Value> {
    Json(document())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_document_lists_exactly_the_routed_paths() {
        let document = document();
        let documented: BTreeSet<(String, String)> =
            documented_routes(&document).into_iter().collect();
        let routed: BTreeSet<(String, String)> = super::super::routes()
            .into_iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        let missing: Vec<_> = routed.difference(&documented).collect();
        let extra: Vec<_> = documented.difference(&routed).collect();
        assert!(missing.is_empty(), "routed but not documented: {missing:?}");
        assert!(extra.is_empty(), "documented but not routed: {extra:?}");
        assert_eq!(document["openapi"], "3.1.0");
    }
}
