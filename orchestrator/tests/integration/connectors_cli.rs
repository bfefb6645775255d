//! Hosted connectors through `troupe tools search|describe|call --config troupe.yaml`, against
//! a real HTTP gateway on 127.0.0.1 ([`MockGateway`]): every connector conformance case of
//! `tools/tests/fixtures/tool_search/` with the case's payload, the merged ranking, every way
//! a gateway fails (401, 412, 5xx, garbage, a hang, a 50 MB body), a connector batch in input
//! order with the slug retry, `enabled: false`, and the token kept out of everything printed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::support::gateway::{MockGateway, Reply};

const TOKEN_ENV: &str = "TROUPE_TEST_GATEWAY_TOKEN";
const TOKEN: &str = "gw-secret-token-5f2c91";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/tests/fixtures/tool_search")
}

fn case(name: &str) -> Value {
    let text = std::fs::read_to_string(fixtures().join(format!("{name}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A folder with the case's catalog (plus its extra tool defs) and a troupe.yaml pointing
/// `tools.connectors` at `gateway`.
struct World {
    dir: tempfile::TempDir,
    catalog: PathBuf,
    config: PathBuf,
}

fn world(catalog_of: &Value, connectors: Value) -> World {
    let dir = tempfile::tempdir().unwrap();
    let mut entries = catalog_of["catalog"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(extra) = catalog_of["extra_tool_defs"].as_array() {
        entries.extend(extra.iter().cloned());
    }
    let catalog = dir.path().join("catalog.json");
    std::fs::write(&catalog, Value::Array(entries).to_string()).unwrap();
    let config = dir.path().join("troupe.yaml");
    let doc = json!({"tools": {"tool_search": {"ranking": "reference"}, "connectors": connectors}});
    std::fs::write(&config, doc.to_string()).unwrap();
    World {
        dir,
        catalog,
        config,
    }
}

fn connectors_at(gateway: &MockGateway) -> Value {
    json!({"enabled": true, "url": gateway.url, "token_env": TOKEN_ENV, "timeout_s": 5})
}

/// Runs `troupe tools <command> --catalog … --config … --args <args>`; the parsed stdout and
/// the raw stdout and stderr.
fn troupe_tools(world: &World, command: &str, args: &Value, extra: &[&str]) -> (Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .stdin(Stdio::null())
        .env("TROUPE_HOME", world.dir.path().join("home"))
        .env(TOKEN_ENV, TOKEN)
        .args(["tools", command, "--catalog"])
        .arg(&world.catalog)
        .arg("--config")
        .arg(&world.config)
        .args(["--args", &args.to_string()])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        !stdout.contains(TOKEN) && !stderr.contains(TOKEN),
        "the gateway token leaked: {stdout}\n{stderr}"
    );
    let value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (value, format!("{stdout}\n{stderr}"))
}

fn search_args(case: &Value) -> Value {
    if let Some(args) = case.get("args") {
        return args.clone();
    }
    let mut args = Map::new();
    args.insert("queries".into(), case["queries"].clone());
    if !case["limit"].is_null() {
        args.insert("limit".into(), case["limit"].clone());
    }
    Value::Object(args)
}

/// The reply a case's gateway gives to a search.
fn search_reply(case: &Value) -> Reply {
    match case["connector_failure"].as_str() {
        Some("unreachable") => Reply::Status(503, "{}".into()),
        Some("sign_in_expired") => Reply::Status(401, "{}".into()),
        Some("not_set_up") => Reply::Status(412, "{}".into()),
        Some(other) => panic!("unknown connector_failure {other}"),
        None => Reply::Json(case["connector_payload"].clone()),
    }
}

/// Checks a search answer against a case's `expected`: matches per query, the shared map's
/// names and `required`, `total_available`, `available_sources`, and the `connectors` field.
fn check_search(name: &str, got: &Value, expected: &Value) {
    assert_eq!(got["queries"], expected["queries"], "{name}: queries");
    assert_eq!(
        got["total_available"], expected["total_available"],
        "{name}: total_available in {got}"
    );
    let groups = expected["results"].as_array().unwrap();
    for (i, want) in groups.iter().enumerate() {
        let have = &got["results"][i];
        assert_eq!(
            have["matches"], want["matches"],
            "{name}: matches of query {i}"
        );
        assert_eq!(
            have.get("available_sources"),
            want.get("available_sources"),
            "{name}: available_sources of query {i}"
        );
    }
    let want_tools = expected["tools"].as_object().unwrap();
    let have_tools = got["tools"].as_object().unwrap();
    let keys = |m: &Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(have_tools), keys(want_tools), "{name}: tools map");
    for (tool, record) in want_tools {
        for field in ["source", "source_name", "description", "required"] {
            assert_eq!(
                have_tools[tool][field], record[field],
                "{name}: {tool}.{field}"
            );
        }
    }
    match expected.get("connectors") {
        None => assert!(
            got.get("connectors").is_none(),
            "{name}: unexpected connectors field {got}"
        ),
        Some(want) => {
            let have = &got["connectors"];
            assert_eq!(have["status"], want["status"], "{name}: connectors.status");
            assert_eq!(
                have.get("reason"),
                want.get("reason"),
                "{name}: connectors.reason"
            );
            assert!(have["hint"].is_string(), "{name}: connectors.hint");
        }
    }
}

/// Runs one recorded search case through the CLI against a gateway serving its payload.
fn run_search_case(name: &str) {
    let case = case(name);
    let reply = search_reply(&case);
    let gateway = MockGateway::start(move |path, _| match path {
        "search" => reply.clone(),
        _ => Reply::Status(404, "{}".into()),
    });
    let world = world(&case, connectors_at(&gateway));
    let (got, _) = troupe_tools(&world, "search", &search_args(&case), &[]);
    check_search(name, &got, &case["expected"]);
    // The gateway was asked exactly as the reference asked its own: once, with every query,
    // or (when local results fill every group) not at all.
    if let Some(calls) = case["debug"]["connector_search_called_with"].as_array() {
        let sent: Vec<Value> = gateway
            .seen_at("search")
            .into_iter()
            .map(|s| s.body["queries"].clone())
            .collect();
        assert_eq!(sent, *calls, "{name}: gateway searches");
    }
    for seen in gateway.seen() {
        assert_eq!(
            seen.auth.as_deref(),
            Some(format!("Bearer {TOKEN}").as_str())
        );
    }
}

#[test]
fn conformance_connectors_failure_unreachable() {
    run_search_case("connectors_failure_unreachable");
}

#[test]
fn conformance_connectors_not_called_when_local_full() {
    run_search_case("connectors_not_called_when_local_full");
}

#[test]
fn conformance_describe_connector_names() {
    let case = case("describe_connector_names");
    // The gateway knows the described tools under their conventional slugs.
    let mut schemas = Map::new();
    for (name, record) in case["connector_describe_tools"].as_object().unwrap() {
        let mut parts = name.splitn(3, "__").skip(1);
        let (connector, tool) = (parts.next().unwrap(), parts.next().unwrap());
        schemas.insert(
            format!("{}_{tool}", connector.to_uppercase()),
            json!({"connector": connector, "description": record["description"], "input_schema": record["parameters"]}),
        );
    }
    let schemas = Value::Object(schemas);
    let gateway = MockGateway::start(move |path, body| match path {
        "describe" => {
            let asked: Vec<&str> = body["slugs"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let answered: Map<String, Value> = schemas
                .as_object()
                .unwrap()
                .iter()
                .filter(|(slug, _)| asked.contains(&slug.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Reply::Json(json!({ "schemas": answered }))
        }
        _ => Reply::Status(404, "{}".into()),
    });
    let world = world(&case, connectors_at(&gateway));
    let (got, _) = troupe_tools(&world, "describe", &case["args"], &[]);
    let expected = &case["expected"];
    assert_eq!(got["tools"], expected["tools"], "{got}");
    assert_eq!(got["not_found"], expected["not_found"]);
    assert!(got["hint"].is_string());
    assert!(
        got.get("errors").is_none() && got.get("connectors").is_none(),
        "{got}"
    );
    assert_eq!(
        gateway.seen_at("describe").len(),
        1,
        "one request for every connector name"
    );
}

#[test]
fn conformance_tool_call_mixed_batch_rejected() {
    let case = case("tool_call_mixed_batch_rejected");
    let gateway = MockGateway::start(|_, _| Reply::Status(500, "{}".into()));
    let mut with_grant = case.clone();
    with_grant["extra_tool_defs"] = json!([{"name": "manage_connections", "source": null, "description": "Connect apps.", "parameters": {"type": "object"}}]);
    let world = world(&with_grant, connectors_at(&gateway));
    let (got, _) = troupe_tools(&world, "call", &case["args"], &["--dry-run"]);
    let error = got["error"].as_str().unwrap_or_else(|| panic!("{got}"));
    assert!(error.contains("connectors__"), "{error}");
    assert!(
        gateway.seen().is_empty(),
        "a refused batch reaches no gateway"
    );
}

/// The recorded payload (twin slugs, a schema without a connector, a group for another query)
/// answering "gmail send email" over the 15-tool catalog: connector and local tools are ranked
/// in one pass, so the statistics change. `gmail` is no longer the rarest word (`send` is), so
/// `gmail_fetch_emails` drops out and `slack_send_message` comes in; the twin slugs make one
/// tool, described by the conventional slug. The expected order and the scores behind it were
/// worked out by hand with the reference's formula: 6.19, 5.30, 1.50.
#[test]
fn connector_hits_are_ranked_in_the_same_pass_and_twins_are_one_tool() {
    let catalog = case("connectors_failure_unreachable");
    let payload = case("connectors_not_called_when_local_full")["connector_payload"].clone();
    // The Gmail group answers whatever the first query is.
    let gateway = MockGateway::start(move |path, body| match path {
        "search" => {
            let mut payload = payload.clone();
            payload["results"][0]["use_case"] = body["queries"][0].clone();
            Reply::Json(payload)
        }
        _ => Reply::Status(404, "{}".into()),
    });
    let world = world(&catalog, connectors_at(&gateway));
    let (got, _) = troupe_tools(
        &world,
        "search",
        &json!({"queries": ["gmail send email"]}),
        &[],
    );
    assert_eq!(
        got["results"][0]["matches"],
        json!([
            "connectors__gmail__SEND_EMAIL",
            "gmail_send_email",
            "slack_send_message"
        ]),
        "{got}"
    );
    assert_eq!(got["total_available"], 14);
    assert_eq!(
        got["tools"]["connectors__gmail__SEND_EMAIL"],
        json!({"source": "connectors", "source_name": "gmail", "description": "Send an email through the connected Gmail account.", "required": ["to"]})
    );
    assert!(got.get("connectors").is_none());
    // `limit` caps the merged group as a whole: four tools hold "email", three come back.
    let (got, _) = troupe_tools(
        &world,
        "search",
        &json!({"queries": ["email"], "limit": 3}),
        &[],
    );
    let matches = got["results"][0]["matches"].as_array().unwrap();
    assert_eq!(matches.len(), 3, "{got}");
    assert!(
        matches
            .iter()
            .any(|m| m.as_str().unwrap().starts_with("connectors__"))
    );
    assert_eq!(gateway.seen_at("search").len(), 2);
    // Two local tools fill a group of two: the gateway is not asked.
    let (got, _) = troupe_tools(
        &world,
        "search",
        &json!({"queries": ["gmail send email"], "limit": 2}),
        &[],
    );
    assert_eq!(
        got["results"][0]["matches"],
        json!(["gmail_send_email", "gmail_fetch_emails"])
    );
    assert_eq!(gateway.seen_at("search").len(), 2);
}

/// Every way a gateway fails leaves the local results, with the failure named.
#[test]
fn a_failing_gateway_degrades_to_local_results() {
    let catalog = case("connectors_failure_unreachable");
    let local = json!(["gmail_send_email", "gmail_fetch_emails"]);
    for (reply, status, reason) in [
        (
            Reply::Status(401, "{}".into()),
            "unavailable",
            Some("sign_in_expired"),
        ),
        (Reply::Status(412, "{}".into()), "not_set_up", None),
        (
            Reply::Status(502, "bad gateway".into()),
            "unavailable",
            Some("unreachable"),
        ),
        (Reply::Garbage, "unavailable", Some("unreachable")),
        (
            Reply::Json(json!({"schemas": [], "results": []})),
            "unavailable",
            Some("unreachable"),
        ),
        (
            Reply::Huge(50 * 1024 * 1024),
            "unavailable",
            Some("unreachable"),
        ),
    ] {
        let label = format!("{reply:?}").chars().take(40).collect::<String>();
        let gateway = MockGateway::start(move |_, _| reply.clone());
        let world = world(&catalog, connectors_at(&gateway));
        let started = Instant::now();
        let (got, _) = troupe_tools(
            &world,
            "search",
            &json!({"queries": ["gmail send email"]}),
            &[],
        );
        assert_eq!(got["results"][0]["matches"], local, "{label}: {got}");
        assert_eq!(got["connectors"]["status"], status, "{label}");
        assert_eq!(
            got["connectors"].get("reason").and_then(Value::as_str),
            reason,
            "{label}"
        );
        assert!(started.elapsed() < Duration::from_secs(20), "{label}");
    }
}

/// A gateway that never answers costs at most `timeout_s`, then the local results stand.
#[test]
fn a_hung_gateway_is_bounded_by_its_timeout() {
    let catalog = case("connectors_failure_unreachable");
    let gateway = MockGateway::start(|_, _| Reply::Hang);
    let world = world(
        &catalog,
        json!({"url": gateway.url, "token_env": TOKEN_ENV, "timeout_s": 1}),
    );
    let started = Instant::now();
    let (got, _) = troupe_tools(
        &world,
        "search",
        &json!({"queries": ["gmail send email"]}),
        &[],
    );
    let took = started.elapsed();
    assert_eq!(got["connectors"]["reason"], "unreachable");
    assert_eq!(
        got["results"][0]["matches"],
        json!(["gmail_send_email", "gmail_fetch_emails"])
    );
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "{took:?}"
    );
}

/// `enabled: false` is troupe without connectors: the gateway is never asked and the answer
/// is the one without the section.
#[test]
fn disabled_connectors_change_nothing() {
    let catalog = case("connectors_failure_unreachable");
    let gateway = MockGateway::start(|_, _| Reply::Json(json!({})));
    let off = world(&catalog, json!({"enabled": false, "url": gateway.url}));
    let none = world(&catalog, Value::Null);
    let args = json!({"queries": ["gmail send email", "nothing here"]});
    let (with_off, _) = troupe_tools(&off, "search", &args, &[]);
    let (without, _) = troupe_tools(&none, "search", &args, &[]);
    assert_eq!(with_off, without);
    let call = json!({"calls": [{"name": "connectors__gmail__SEND_EMAIL", "arguments": {}}]});
    let (refused, _) = troupe_tools(&off, "call", &call, &[]);
    assert!(refused["error"].is_string(), "{refused}");
    assert!(gateway.seen().is_empty());
}

/// A batch of connector entries: one `execute` per entry, in input order, the conventional
/// slug first and the literal one after a TOOL_NOT_FOUND, results spliced back in order, each
/// entry's failure its own.
#[test]
fn a_connector_batch_runs_one_request_per_entry_in_order() {
    let catalog = case("connectors_failure_unreachable");
    let gateway = MockGateway::start(|path, body| {
        if path != "execute" {
            return Reply::Status(404, "{}".into());
        }
        let tool = body["tool"].as_str().unwrap_or("");
        match tool {
            "GMAIL_SEND_EMAIL" => {
                Reply::Json(json!({"ok": true, "data": {"sent_to": body["arguments"]["to"]}}))
            }
            // Known only under its literal slug.
            "NOTION_QUERY" => Reply::Json(
                json!({"ok": false, "error": {"code": "TOOL_NOT_FOUND", "message": "no such slug"}}),
            ),
            "QUERY" => Reply::Json(json!({"ok": true, "data": [1, 2]})),
            "LINEAR_CREATE_ISSUE" => Reply::Json(
                json!({"ok": false, "error": {"code": "CONNECTION_REQUIRED", "message": "linear is not connected"}}),
            ),
            _ => Reply::Status(500, "{}".into()),
        }
    });
    let world = world(&catalog, connectors_at(&gateway));
    let calls = json!({"calls": [
        {"name": "connectors__gmail__SEND_EMAIL", "arguments": {"to": "a@example.com"}},
        {"name": "connectors__notion__QUERY", "arguments": "{}"},
        {"name": "connectors__linear__CREATE_ISSUE", "arguments": {"title": "x"}},
        {"name": "connectors__broken", "arguments": {}},
    ]});
    let (got, _) = troupe_tools(&world, "call", &calls, &[]);
    assert_eq!(got["total_count"], 4, "{got}");
    assert_eq!(got["success_count"], 2);
    assert_eq!(got["error_count"], 2);
    let results = got["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "connectors__gmail__SEND_EMAIL",
            "connectors__notion__QUERY",
            "connectors__linear__CREATE_ISSUE",
            "connectors__broken"
        ]
    );
    assert_eq!(results[0]["response"], json!({"sent_to": "a@example.com"}));
    assert_eq!(results[1]["response"], json!([1, 2]));
    assert_eq!(results[2]["error"]["code"], "CONNECTION_REQUIRED");
    assert!(
        results[2]["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("manage_connections")
    );
    assert_eq!(results[3]["error"]["code"], "TOOL_NOT_FOUND");
    let sent: Vec<(String, String)> = gateway
        .seen_at("execute")
        .into_iter()
        .map(|s| {
            (
                s.body["connector"].as_str().unwrap().to_string(),
                s.body["tool"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        sent,
        [
            ("gmail".to_string(), "GMAIL_SEND_EMAIL".to_string()),
            ("notion".into(), "NOTION_QUERY".into()),
            ("notion".into(), "QUERY".into()),
            ("linear".into(), "LINEAR_CREATE_ISSUE".into()),
        ]
    );
    // The token went to the gateway, and only there: never into a tool's arguments.
    for seen in gateway.seen() {
        assert_eq!(
            seen.auth.as_deref(),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert!(!seen.body.to_string().contains(TOKEN));
    }
    // More than ten entries is refused before anything runs.
    let eleven: Vec<Value> = (0..11)
        .map(|i| json!({"name": format!("connectors__gmail__T{i}")}))
        .collect();
    let (refused, _) = troupe_tools(&world, "call", &json!({ "calls": eleven }), &[]);
    assert!(
        refused["error"].as_str().unwrap().contains("10"),
        "{refused}"
    );
    assert_eq!(gateway.seen_at("execute").len(), 4);
}

/// Under the default hybrid ranking a group is filled with near misses, which would keep the
/// gateway from ever being asked: only local matches that hold most of the query count as
/// filling it. "gmail send email" has one such local tool, so the gateway is asked and its
/// tools are ranked beside the local ones.
#[test]
fn the_hybrid_ranking_asks_the_gateway_past_near_misses() {
    let catalog = case("connectors_failure_unreachable");
    let payload = case("connectors_not_called_when_local_full")["connector_payload"].clone();
    let gateway = MockGateway::start(move |path, body| match path {
        "search" => {
            let mut payload = payload.clone();
            payload["results"][0]["use_case"] = body["queries"][0].clone();
            Reply::Json(payload)
        }
        _ => Reply::Status(404, "{}".into()),
    });
    let world = world(&catalog, connectors_at(&gateway));
    // The same world with the default ranking.
    let doc = json!({"tools": {"connectors": connectors_at(&gateway)}});
    std::fs::write(&world.config, doc.to_string()).unwrap();
    let (got, _) = troupe_tools(
        &world,
        "search",
        &json!({"queries": ["gmail send email"]}),
        &[],
    );
    let matches: Vec<&str> = got["results"][0]["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(matches.first(), Some(&"gmail_send_email"), "{got}");
    assert!(matches.contains(&"connectors__gmail__SEND_EMAIL"), "{got}");
    assert_eq!(
        got["tools"]["connectors__gmail__SEND_EMAIL"]["source"],
        "connectors"
    );
    assert_eq!(gateway.seen_at("search").len(), 1);
}
