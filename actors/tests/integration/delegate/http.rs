//! Delegation through the OpenAI-compatible provider over real HTTP (the mock server).

use super::*;

#[cfg(feature = "mock-server")]
#[actix_rt::test]
async fn delegation_works_through_the_openai_compatible_provider() {
    use troupe_actors::model::mock_server::MockServer;
    use troupe_actors::model::{OpenAiConfig, OpenAiProvider};

    let registry = Registry::with_tools([fixed("note", "core", "Take a note", "noted")]);
    let script = Script::new()
        .turn(
            delegate(json!([{"goal": "http-a"}, {"goal": "http-b"}, {"goal": "http-c"}]))
                .when_input_contains("HTTP-GO"),
        )
        .turn(ScriptTurn::tool_call("note", json!({})).when_input_contains("http-b"))
        .turn(ScriptTurn::text("a-done").when_input_contains("http-a"))
        .turn(ScriptTurn::text("b-done").when_input_contains("noted"))
        .turn(ScriptTurn::text("c-done").when_input_contains("http-c"))
        .turn(ScriptTurn::text("HTTP-DONE").when_input_contains("b-done"));
    let server = MockServer::start(script).await.unwrap();
    let provider =
        OpenAiProvider::new(OpenAiConfig::new(server.url(), "mock-model").with_api_key("sk-test"))
            .unwrap();
    let rig = rig(
        &registry,
        Arc::new(provider),
        session_config(DelegationConfig::default()),
        AllowAll,
    )
    .await;
    let outcome = rig.root.send("HTTP-GO").await.unwrap();
    assert_eq!(outcome.text, "HTTP-DONE", "{outcome:?}");
    let result = call_json(&outcome, 0);
    let summaries: Vec<&str> = result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["summary"].as_str().unwrap())
        .collect();
    assert_eq!(summaries, ["a-done", "b-done", "c-done"]);
    assert_eq!(result["results"][1]["tool_calls"], 1);
    // Root: 2 requests; children: 1 + 2 + 1.
    assert_eq!(server.requests().len(), 6);
}
