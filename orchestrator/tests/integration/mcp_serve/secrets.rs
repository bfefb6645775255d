//! troupe's own keys never reach an MCP client: a file holding the server's token and the
//! model's API key, read through `--toolsets core`, comes back masked in the text the client
//! reads and in its `structuredContent` alike.

use serde_json::json;

use super::{TOKEN, World};

/// The model key the config names inline (a key troupe holds, like the server's token).
const MODEL_KEY: &str = "sk-model-key-for-the-mcp-serve-test-31415";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_file_answer_hides_the_servers_token_and_the_model_key_everywhere() {
    let Some(world) = World::new(
        "mcp_serve secrets",
        &format!("model:\n  base_url: http://127.0.0.1:9/v1\n  model: m\n  api_key: {MODEL_KEY}\n"),
    ) else {
        return;
    };
    let file = world.path().join("leaky.txt");
    std::fs::write(
        &file,
        format!("token={TOKEN}\nkey: {MODEL_KEY}\nan ordinary line\n"),
    )
    .unwrap();
    let server = world.http(&["--toolsets", "core"]).await;
    let args = json!({"path": file.display().to_string()}).to_string();
    let seen = world
        .client(
            "direct",
            &server.target(TOKEN),
            &[("TROUPE_TOOL", "read_file"), ("TROUPE_ARGS", args.as_str())],
        )
        .await;
    assert_eq!(seen["is_error"], json!(false), "{seen}");
    let text = seen["text"].as_str().unwrap();
    let structured = &seen["structured"];
    assert!(
        structured.is_object(),
        "read_file answers structured: {seen}"
    );
    let structured = structured.to_string();
    // The file was read (its ordinary line is there) ...
    assert!(text.contains("an ordinary line"), "{text}");
    assert!(structured.contains("an ordinary line"), "{structured}");
    // ... and neither key is, in either form.
    for secret in [TOKEN, MODEL_KEY] {
        assert!(!text.contains(secret), "{secret} in the text: {text}");
        assert!(
            !structured.contains(secret),
            "{secret} in structuredContent: {structured}"
        );
    }
    assert!(
        structured.contains("redacted"),
        "the keys are marked masked: {structured}"
    );
}
