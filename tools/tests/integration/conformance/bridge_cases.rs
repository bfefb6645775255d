//! Checkers for the `describe` and `tool_call` cases: `tool_describe`'s output (tools and their
//! schemas, not_found, which names get errors, key order), and `tool_call`'s resolution (the
//! tool, the arguments as sent, the coerced arguments, the validation error) through both the
//! separate steps and the one-shot `resolve` the runtime uses.

use serde_json::{Map, Value};
use troupe_tools::bridge::tool_call::{resolve_entry, validate};
use troupe_tools::bridge::{resolve, tool_describe};

use super::fixture::{Case, Outcome, matches_with_marker};

/// Runs one `describe` or `tool_call` case.
pub(crate) fn run(case: &Case) -> Outcome {
    match case.kind.as_str() {
        "describe" if case.name == "describe_connector_names" => {
            Outcome::Skip("needs a gateway: run through the CLI against one in orchestrator/tests/integration/connectors_cli.rs".into())
        }
        "describe" => describe(case),
        "tool_call" => tool_call(case),
        other => Outcome::Fail(format!("bridge_cases cannot check kind {other}")),
    }
}

fn describe(case: &Case) -> Outcome {
    let view = case.registry().view_all();
    let got = tool_describe(&view, &case.config(), case.get("args"));
    let want = case.expected();
    if !matches_with_marker(&got, want) {
        return Outcome::Fail(format!("got {got}\nwant {want}"));
    }
    if let Some(err) = got.get("error") {
        if !err.is_string() {
            return Outcome::Fail(format!("error must be a string: {got}"));
        }
        return Outcome::Pass;
    }
    // tools, then not_found and hint, then errors: the order the model reads them in.
    let got_keys: Vec<&String> = got
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    let want_keys: Vec<&String> = want
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    if got_keys != want_keys {
        return Outcome::Fail(format!("key order {got_keys:?}, want {want_keys:?}"));
    }
    Outcome::Pass
}

fn tool_call(case: &Case) -> Outcome {
    let view = case.registry().view_all();
    let config = case.config();
    let args = case.get("args");
    let want = case.expected();
    let one_shot = resolve(&view, &config, args);
    let entry = resolve_entry(&view, &config, args);

    if !want["error"].is_null() {
        // Resolution itself must fail, with an {"error": <string>} value, in both paths.
        let Err(error) = entry else {
            return Outcome::Fail(format!("resolved to {entry:?}, want an error"));
        };
        if !error["error"].is_string() {
            return Outcome::Fail(format!("error value without an error string: {error}"));
        }
        if one_shot.as_ref().err() != Some(&error) {
            return Outcome::Fail(format!("resolve gave {one_shot:?}, resolve_entry {error}"));
        }
        return Outcome::Pass;
    }

    let call = match entry {
        Ok(call) => call,
        Err(e) => return Outcome::Fail(format!("did not resolve: {e}")),
    };
    if Some(call.name.as_str()) != want["resolved_name"].as_str() {
        return Outcome::Fail(format!(
            "resolved to {}, want {}",
            call.name, want["resolved_name"]
        ));
    }
    if Value::Object(call.arguments.clone()) != want["resolved_args"] {
        return Outcome::Fail(format!(
            "arguments {:?}, want {}",
            call.arguments, want["resolved_args"]
        ));
    }
    let check = validate(&view, &call);
    if !want["coerced_args"].is_null()
        && Value::Object(check.arguments.clone()) != want["coerced_args"]
    {
        return Outcome::Fail(format!(
            "coerced {:?}, want {}",
            check.arguments, want["coerced_args"]
        ));
    }
    match (&check.error, &want["validation"]) {
        (None, Value::Null) => {
            let expected_call_args = want["coerced_args"]
                .as_object()
                .cloned()
                .unwrap_or_else(Map::new);
            match one_shot {
                Ok(done) if done.name == call.name && done.arguments == expected_call_args => {
                    Outcome::Pass
                }
                other => Outcome::Fail(format!("resolve gave {other:?}, want the coerced call")),
            }
        }
        (Some(got), want_validation) if !want_validation.is_null() => {
            if !matches_with_marker(got, want_validation) {
                return Outcome::Fail(format!("validation {got}\nwant {want_validation}"));
            }
            match one_shot {
                Err(e) if &e == got => Outcome::Pass,
                other => {
                    Outcome::Fail(format!("resolve gave {other:?}, want the validation error"))
                }
            }
        }
        (got, want_validation) => {
            Outcome::Fail(format!("validation {got:?}, want {want_validation}"))
        }
    }
}
