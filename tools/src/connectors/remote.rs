//! Reading a gateway's search and describe answers into tool definitions the catalog ranks
//! beside the local tools, and the `connectors` field the bridge adds when the gateway failed.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::gateway::Failure;
use super::names::{format_connector_name, parse_connector_name, vendor_slug_candidates};
use crate::tool::{ToolDef, ToolKind};

/// The toolset connector tools are given (and the source `tool_search` reports).
pub const CONNECTORS_TOOLSET: &str = "connectors";

/// A connector tool as a catalog-only definition: `connectors__<connector>__<tool>`, the
/// gateway's description and input schema, the raw connector as its source name and the vendor
/// slug it was found under (the index text uses both).
pub fn connector_def(connector: &str, slug: &str, description: &str, schema: Value) -> ToolDef {
    let mut def = ToolDef::new(
        format_connector_name(&connector.to_lowercase(), slug),
        description,
        schema,
    )
    .with_toolset(CONNECTORS_TOOLSET)
    .with_kind(ToolKind::Connector)
    .exclusive();
    def.source_name = Some(connector.to_string());
    def.vendor_slug = Some(slug.to_string());
    def
}

/// The connector tools of a search answer, per query (matched by position). A group whose
/// echoed `use_case` differs from its query is dropped; slugs without a schema or a connector
/// are skipped; two slugs that make the same name keep the conventional one, in the first one's
/// place. A payload whose `schemas` is not a map or whose `results` is not a list is
/// [`Failure::Unreachable`].
pub fn remote_groups(
    payload: &Value,
    queries: &[String],
) -> Result<Vec<Vec<Arc<ToolDef>>>, Failure> {
    let Value::Object(payload) = payload else {
        return Err(Failure::Unreachable);
    };
    let empty_schemas = Map::new();
    let schemas = match payload.get("schemas") {
        None | Some(Value::Null) => &empty_schemas,
        Some(Value::Object(schemas)) => schemas,
        Some(_) => return Err(Failure::Unreachable),
    };
    let results: &[Value] = match payload.get("results") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(results)) => results,
        Some(_) => return Err(Failure::Unreachable),
    };
    Ok(queries
        .iter()
        .enumerate()
        .map(|(i, query)| match results.get(i) {
            Some(Value::Object(group)) => group_defs(group, query, schemas),
            _ => Vec::new(),
        })
        .collect())
}

fn group_defs(
    group: &Map<String, Value>,
    query: &str,
    schemas: &Map<String, Value>,
) -> Vec<Arc<ToolDef>> {
    if let Some(Value::String(echo)) = group.get("use_case")
        && !echo.is_empty()
        && echo != query
    {
        return Vec::new();
    }
    let Some(Value::Array(slugs)) = group.get("tools") else {
        return Vec::new();
    };
    // (name, slug, def) in first-seen order.
    let mut kept: Vec<(String, String, ToolDef)> = Vec::new();
    for slug in slugs.iter().filter_map(Value::as_str) {
        let Some(schema) = schemas.get(slug).and_then(Value::as_object) else {
            continue;
        };
        let Some(connector) = schema
            .get("connector")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
        else {
            continue;
        };
        let description = match schema.get("description") {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => String::new(),
            Some(other) => other.to_string(),
        };
        let parameters = match schema.get("input_schema") {
            Some(v @ Value::Object(_)) => v.clone(),
            _ => json!({}),
        };
        let def = connector_def(connector, slug, &description, parameters);
        match kept.iter_mut().find(|(name, _, _)| *name == def.name) {
            None => kept.push((def.name.clone(), slug.to_string(), def)),
            Some((_, seen, _)) if seen == slug => {}
            Some((name, seen, old)) => {
                let conventional = parse_connector_name(name)
                    .map(|(c, t)| vendor_slug_candidates(c, t).0)
                    .unwrap_or_default();
                let replace = slug == conventional;
                tracing::warn!(
                    name = %name,
                    first = %seen,
                    second = %slug,
                    replace,
                    "connector gateway: two slugs make the same tool name; keeping the conventional one"
                );
                if replace {
                    *seen = slug.to_string();
                    *old = def;
                }
            }
        }
    }
    kept.into_iter().map(|(_, _, def)| Arc::new(def)).collect()
}

/// The `connectors` field of a `tool_search` (`searched`) or `tool_describe` answer when the
/// gateway failed; `names` are the tools that could not be described.
pub fn failure_field(failure: Failure, verb: &str, names: &[String]) -> Value {
    let mut field = Map::new();
    if failure == Failure::NotSetUp {
        field.insert("status".into(), json!("not_set_up"));
        field.insert(
            "hint".into(),
            json!("Hosted app connectors are not set up for this person yet. Call manage_connections to connect an app; that sets them up, and its tools (mail, calendars, documents and more) become searchable. If the tools above already serve the request, use them instead."),
        );
    } else {
        field.insert("status".into(), json!("unavailable"));
        field.insert("reason".into(), json!(failure.as_str()));
        let mut hint = format!(
            "Hosted connector tools could not be {verb} right now; that does not mean the app is missing."
        );
        if failure == Failure::SignInExpired {
            hint.push_str(" The person has to sign in to the connector gateway again.");
        }
        field.insert("hint".into(), json!(hint));
    }
    if !names.is_empty() {
        field.insert("names".into(), json!(names));
    }
    Value::Object(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(groups: &[Vec<Arc<ToolDef>>]) -> Vec<Vec<String>> {
        groups
            .iter()
            .map(|g| g.iter().map(|d| d.name.clone()).collect())
            .collect()
    }

    #[test]
    fn twins_keep_the_conventional_slug_in_the_first_place() {
        let payload = json!({
            "schemas": {
                "SEND_EMAIL": {"connector": "GMAIL", "description": "literal"},
                "GMAIL_SEND_EMAIL": {"connector": "gmail", "description": "conventional"},
                "GMAIL_FETCH": {"connector": "gmail", "description": null, "input_schema": [1]},
                "NOCONN": {"description": "x"}
            },
            "results": [
                {"use_case": "gmail send", "tools": ["SEND_EMAIL", "GMAIL_FETCH", "GMAIL_SEND_EMAIL", "GMAIL_SEND_EMAIL", "NOCONN", "MISSING", 3]},
                {"use_case": "something else", "tools": ["GMAIL_FETCH"]}
            ]
        });
        let queries = vec![
            "gmail send".to_string(),
            "other".to_string(),
            "third".to_string(),
        ];
        let groups = remote_groups(&payload, &queries).unwrap();
        assert_eq!(
            names(&groups),
            vec![
                vec![
                    "connectors__gmail__SEND_EMAIL".to_string(),
                    "connectors__gmail__FETCH".to_string()
                ],
                vec![],
                vec![]
            ]
        );
        let first = &groups[0][0];
        assert_eq!(first.description(), "conventional");
        assert_eq!(first.vendor_slug.as_deref(), Some("GMAIL_SEND_EMAIL"));
        assert_eq!(groups[0][1].description(), "");
        assert_eq!(groups[0][1].parameters(), &json!({}));
    }

    #[test]
    fn bad_shapes_are_unreachable_and_an_empty_payload_is_nothing() {
        let q = vec!["x".to_string()];
        for bad in [
            json!({"schemas": [], "results": []}),
            json!({"schemas": {}, "results": {}}),
            json!([1]),
        ] {
            assert_eq!(
                remote_groups(&bad, &q).err(),
                Some(Failure::Unreachable),
                "{bad}"
            );
        }
        assert_eq!(
            names(&remote_groups(&json!({}), &q).unwrap()),
            vec![Vec::<String>::new()]
        );
    }

    #[test]
    fn failure_fields() {
        let f = failure_field(Failure::NotSetUp, "searched", &[]);
        assert_eq!(f["status"], "not_set_up");
        assert!(f.get("reason").is_none());
        let f = failure_field(
            Failure::SignInExpired,
            "described",
            &["connectors__a__B".into()],
        );
        assert_eq!(f["reason"], "sign_in_expired");
        assert_eq!(f["names"], json!(["connectors__a__B"]));
    }
}
