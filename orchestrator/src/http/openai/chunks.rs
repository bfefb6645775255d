//! The pieces of a chat completion as OpenAI's clients read them: the whole answer
//! (`chat.completion`) and the chunks of a streamed one (`chat.completion.chunk`).

use serde_json::{Value, json};

use super::client_tools::ClientCall;

/// What every piece of one completion carries.
#[derive(Debug, Clone)]
pub struct Completion {
    /// `chatcmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model id the client asked for.
    pub model: String,
    /// The troupe session that answers.
    pub session_id: String,
}

impl Completion {
    /// A new completion of `model` by session `session_id`.
    pub fn new(model: &str, session_id: &str) -> Completion {
        Completion {
            id: format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
            created: now(),
            model: model.to_string(),
            session_id: session_id.to_string(),
        }
    }

    /// The whole answer: `content`, or calls to the client's tools.
    pub fn message(
        &self,
        content: Option<&str>,
        calls: &[ClientCall],
        finish_reason: &str,
        usage: Value,
    ) -> Value {
        let mut message = json!({"role": "assistant", "content": content, "refusal": null});
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls.iter().map(call_json).collect());
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
            "usage": usage,
            "troupe": {"session_id": self.session_id},
        })
    }

    /// A chunk with `delta` (and the finish reason on the last one).
    pub fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        })
    }

    /// The first chunk: the role.
    pub fn opening(&self) -> Value {
        self.chunk(json!({"role": "assistant", "content": ""}), None)
    }

    /// A chunk of text.
    pub fn text(&self, text: &str) -> Value {
        self.chunk(json!({"content": text}), None)
    }

    /// The chunk that names the client's tool calls, whole.
    pub fn tool_calls(&self, calls: &[ClientCall]) -> Value {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                let mut value = call_json(call);
                value["index"] = json!(i);
                value
            })
            .collect();
        self.chunk(json!({"tool_calls": calls}), None)
    }

    /// The chunk after the choices, with `usage` (when the client asked for it with
    /// `stream_options.include_usage`).
    pub fn usage(&self, usage: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [],
            "usage": usage,
        })
    }
}

fn call_json(call: &ClientCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

/// Unix seconds now.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
