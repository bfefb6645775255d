//! Views as a security property: a child never finds, describes or calls what its parent did not grant.

use super::*;

#[actix_rt::test]
async fn a_child_cannot_find_describe_or_call_what_its_parent_did_not_grant() {
    let opened = Arc::new(AtomicUsize::new(0));
    let counter = opened.clone();
    let registry = Registry::with_tools([
        fixed(
            "read_notes",
            "notes",
            "Read the team notes",
            "notes content",
        ),
        tool(
            "vault_open",
            "vault",
            "Open the secret vault and read stored credentials",
            move |_, _| {
                counter.fetch_add(1, Ordering::SeqCst);
                Box::pin(async { ToolResult::text("credentials") })
            },
        ),
        fixed("clarify", "clarify", "Ask the user a question", "answer"),
        fixed("memory", "memory", "Remember a fact", "saved"),
        fixed("send_message", "messaging", "Message someone", "sent"),
        fixed("kanban_show", "kanban", "Show a kanban task", "task"),
    ]);
    let probe_calls = vec![
        (
            "tool_search",
            json!({"queries": ["secret vault credentials"]}),
        ),
        ("tool_describe", json!({"names": ["vault_open"]})),
        (
            "tool_call",
            json!({"calls": [{"name": "vault_open", "arguments": {}}]}),
        ),
        ("vault_open", json!({})),
        ("clarify", json!({})),
        ("memory", json!({})),
        ("send_message", json!({})),
        ("kanban_show", json!({})),
        (
            "tool_call",
            json!({"calls": [{"name": "kanban_show", "arguments": {}}]}),
        ),
        ("delegate_task", json!({"tasks": [{"goal": "deeper"}]})),
        ("read_notes", json!({})),
    ];
    let mut probe = ScriptTurn::text("probing").when_input_contains("probe the vault");
    for (name, args) in &probe_calls {
        probe = probe.with_tool_call(*name, args.clone());
    }
    let provider = scripted(vec![
        // The parent can find the vault tool, so a child not finding it means something.
        ScriptTurn::tool_call(
            "tool_search",
            json!({"queries": ["secret vault credentials"]}),
        )
        .when_input_contains("SEC-GO"),
        probe,
        ScriptTurn::text("PROBE-DONE").when_input_contains("notes content"),
        delegate(json!([{"goal": "probe the vault"}])).when_input_contains("vault_open"),
        ScriptTurn::text("SEC-DONE").when_input_contains("PROBE-DONE"),
    ]);
    let config = session_config(DelegationConfig {
        // The ceiling names everything but the vault; blocked tools go whatever it says.
        default_toolsets: Some(
            [
                "notes",
                "clarify",
                "memory",
                "messaging",
                "kanban",
                "delegation",
                "no-such-set",
            ]
            .map(String::from)
            .to_vec(),
        ),
        ..DelegationConfig::default()
    });
    let rig = rig(&registry, provider, config, AllowAll).await;

    let outcome = rig.root.send("SEC-GO").await.unwrap();
    assert_eq!(outcome.text, "SEC-DONE", "{outcome:?}");
    let parent_search = &outcome.calls.first().unwrap().result.to_model_text();
    assert!(parent_search.contains("vault_open"), "{parent_search}");

    let child_calls = rig.recorder.not_by(rig.root.id());
    assert_eq!(child_calls.len(), probe_calls.len(), "{child_calls:#?}");
    for seen in &child_calls {
        match (seen.tool.as_str(), seen.underlying.as_str()) {
            // A child asks and remembers as its parent does (issue 40).
            ("read_notes" | "clarify" | "memory", _) => assert_eq!(seen.status, CallStatus::Ok),
            ("tool_search", _) => {
                assert!(
                    !seen.text.contains("vault_open"),
                    "search leaked: {}",
                    seen.text
                );
                assert!(
                    !seen.text.contains("kanban_show"),
                    "search leaked: {}",
                    seen.text
                );
            }
            ("tool_describe", _) => {
                assert!(
                    !seen.text.contains("stored credentials"),
                    "describe leaked: {}",
                    seen.text
                );
            }
            (tool, underlying) => {
                assert_eq!(
                    seen.status,
                    CallStatus::Error,
                    "{tool} → {underlying} ran: {}",
                    seen.text
                );
            }
        }
    }
    assert_eq!(opened.load(Ordering::SeqCst), 0, "the vault tool never ran");
    let offered = rig.recorder.offered.lock().unwrap().clone();
    let child_offer = offered
        .iter()
        .find(|(session, _)| session.as_str() != rig.root.id())
        .map(|(_, names)| names.clone())
        .unwrap();
    for blocked in ["vault_open", "send_message", "kanban_show", "delegate_task"] {
        assert!(
            !child_offer.iter().any(|n| n == blocked),
            "{blocked} offered: {child_offer:?}"
        );
    }
    assert!(
        child_offer.iter().any(|n| n == "read_notes")
            || child_offer.iter().any(|n| n == "tool_search")
    );
}
