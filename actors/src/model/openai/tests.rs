use super::*;
use std::collections::HashMap;

fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn env_needs_a_base_url() {
    assert!(OpenAiConfig::from_lookup(lookup(&[("OPENAI_API_KEY", "sk-x")])).is_none());
    assert!(OpenAiConfig::from_lookup(lookup(&[("TROUPE_BASE_URL", "  ")])).is_none());
    let config = OpenAiConfig::from_lookup(lookup(&[
        ("OPENAI_BASE_URL", "http://h/v1"),
        ("OPENAI_API_KEY", "sk-openai"),
        ("TROUPE_API_KEY", "sk-troupe"),
    ]))
    .unwrap();
    assert_eq!(config.base_url, "http://h/v1");
    assert_eq!(config.api_key.as_deref(), Some("sk-troupe"));
    assert_eq!(config.model, DEFAULT_MODEL);
    let config = OpenAiConfig::from_lookup(lookup(&[
        ("TROUPE_BASE_URL", "http://a/v1"),
        ("OPENAI_BASE_URL", "http://b/v1"),
        ("TROUPE_MODEL", "qwen2.5"),
    ]))
    .unwrap();
    assert_eq!(config.base_url, "http://a/v1");
    assert_eq!(config.model, "qwen2.5");
    assert_eq!(config.api_key, None);
}

#[test]
fn endpoint_accepts_roots_and_full_urls() {
    assert_eq!(
        OpenAiConfig::new("http://h:1/v1/", "m").endpoint(),
        "http://h:1/v1/chat/completions"
    );
    assert_eq!(
        OpenAiConfig::new("http://h:1/v1/chat/completions", "m").endpoint(),
        "http://h:1/v1/chat/completions"
    );
}

#[test]
fn bad_configs_say_what_to_fix() {
    let err = OpenAiProvider::new(OpenAiConfig::new("localhost:8080", "m")).unwrap_err();
    assert!(err.to_string().contains("not an http(s) URL"), "{err}");
    // No model name: the server is asked at the first request.
    assert!(OpenAiProvider::new(OpenAiConfig::new("http://h/v1", " ")).is_ok());
    let err = OpenAiProvider::new(
        OpenAiConfig::new("http://h/v1", "m")
            .with_api_key_env("TROUPE_TEST_SURELY_UNSET_KEY_VARIABLE"),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("TROUPE_TEST_SURELY_UNSET_KEY_VARIABLE is not set"),
        "{err}"
    );
    let err = OpenAiProvider::new(OpenAiConfig::new("http://h/v1", "m").with_api_key("a\nb"))
        .unwrap_err();
    assert!(err.to_string().contains("line break"), "{err}");
    let err =
        OpenAiProvider::new(OpenAiConfig::new("http://h/v1", "m").with_header("bad name", "v"))
            .unwrap_err();
    assert!(err.to_string().contains("header name"), "{err}");
}

#[test]
fn debug_hides_the_key() {
    let config = OpenAiConfig::new("http://h/v1", "m").with_api_key("sk-secret");
    let shown = format!("{config:?}");
    assert!(!shown.contains("sk-secret"), "{shown}");
    assert!(shown.contains("(set)"), "{shown}");
}

#[test]
fn notes_keep_the_error_kind() {
    let err = gave_up(
        ModelError::Status {
            status: 503,
            body: "busy".into(),
        },
        4,
    );
    assert!(
        matches!(&err, ModelError::Status { status: 503, body } if body == "busy (gave up after 4 attempts)")
    );
    assert!(matches!(
        with_note(ModelError::Cancelled, "x"),
        ModelError::Cancelled
    ));
}
