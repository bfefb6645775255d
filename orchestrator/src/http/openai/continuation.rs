//! Which session a `/v1` request continues. OpenAI's API is stateless: a client sends the whole
//! conversation each time. troupe keeps the conversation in a session, so it remembers, for each
//! answer it gave, a digest of the conversation as the client saw it up to that answer; a
//! request whose history (all but its new message or tool results) has a known digest goes on
//! with that session. `X-Troupe-Session` names the session outright.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use troupe_tools::sync::lock;

use super::errors::{Kind, OpenAiError, field, required};

/// Conversations remembered; the oldest are forgotten first (a forgotten one starts a new
/// session, seeded with the history the client sends).
pub const REMEMBERED_CONVERSATIONS: usize = 50_000;

/// One message as the client sees it, reduced to what identifies it.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Its text (parts joined), trimmed.
    pub content: String,
    /// An assistant's calls: (id, name, arguments).
    pub tool_calls: Vec<(String, String, String)>,
    /// A tool result's call id.
    pub tool_call_id: Option<String>,
}

impl Turn {
    /// A message of `role` with `content`.
    pub fn text(role: &str, content: &str) -> Turn {
        Turn {
            role: role.into(),
            content: content.trim().to_string(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    fn canonical(&self) -> Value {
        json!([self.role, self.content, self.tool_calls, self.tool_call_id])
    }
}

/// The digest of a conversation.
pub fn digest(turns: &[Turn]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for turn in turns {
        hasher.update(turn.canonical().to_string().as_bytes());
        hasher.update(b"\n");
    }
    hasher.finalize().into()
}

/// The text of a message's `content`: a string, or an array of parts whose text parts are
/// joined (images and files are refused: troupe's sessions take text).
pub fn content_text(value: Option<&Value>, path: &str) -> Result<String, OpenAiError> {
    match value {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (i, part) in parts.iter().enumerate() {
                let at = format!("{path}[{i}]");
                let Some(part) = part.as_object() else {
                    return Err(OpenAiError::invalid_param(
                        &at,
                        "invalid_type",
                        format!("`{at}` must be an object {{\"type\": \"text\", \"text\": ...}}"),
                    ));
                };
                let kind = required(part, "type", &format!("{at}.type"), Kind::Str)?;
                match kind.as_str().unwrap_or_default() {
                    "text" | "input_text" | "output_text" => {
                        let t = required(part, "text", &format!("{at}.text"), Kind::Str)?;
                        text.push_str(t.as_str().unwrap_or_default());
                    }
                    other => {
                        return Err(OpenAiError::invalid_param(
                            format!("{at}.type"),
                            "unsupported_content",
                            format!(
                                "content parts of type {other} are not supported; troupe's sessions take text parts only"
                            ),
                        ));
                    }
                }
            }
            Ok(text)
        }
        Some(_) => Err(OpenAiError::invalid_param(
            path,
            "invalid_type",
            format!("`{path}` must be a string or an array of text parts"),
        )),
    }
}

/// Reads the chat `messages` array.
pub fn parse_messages(body: &Map<String, Value>) -> Result<Vec<Turn>, OpenAiError> {
    let messages = required(body, "messages", "messages", Kind::Array)?;
    let mut turns = Vec::new();
    for (i, message) in messages.as_array().into_iter().flatten().enumerate() {
        let at = format!("messages[{i}]");
        let Some(message) = message.as_object() else {
            return Err(OpenAiError::invalid_param(
                &at,
                "invalid_type",
                format!("`{at}` must be an object with `role` and `content`"),
            ));
        };
        let role = required(message, "role", &format!("{at}.role"), Kind::Str)?
            .as_str()
            .unwrap_or_default();
        let role = match role {
            "developer" => "system",
            "system" | "user" | "assistant" | "tool" => role,
            other => {
                return Err(OpenAiError::invalid_param(
                    format!("{at}.role"),
                    "invalid_role",
                    format!(
                        "`{at}.role` is {other:?}; send system, developer, user, assistant or tool"
                    ),
                ));
            }
        };
        let content = content_text(message.get("content"), &format!("{at}.content"))?;
        let mut turn = Turn::text(role, &content);
        if role == "assistant"
            && let Some(calls) = field(
                message,
                "tool_calls",
                &format!("{at}.tool_calls"),
                Kind::Array,
            )?
        {
            for (j, call) in calls.as_array().into_iter().flatten().enumerate() {
                let cat = format!("{at}.tool_calls[{j}]");
                let Some(call) = call.as_object() else {
                    return Err(OpenAiError::invalid_param(
                        &cat,
                        "invalid_type",
                        format!("`{cat}` must be an object"),
                    ));
                };
                let id = required(call, "id", &format!("{cat}.id"), Kind::Str)?;
                let function =
                    required(call, "function", &format!("{cat}.function"), Kind::Object)?;
                let function = function.as_object().cloned().unwrap_or_default();
                let name = required(
                    &function,
                    "name",
                    &format!("{cat}.function.name"),
                    Kind::Str,
                )?;
                let arguments = field(
                    &function,
                    "arguments",
                    &format!("{cat}.function.arguments"),
                    Kind::Str,
                )?;
                turn.tool_calls.push((
                    id.as_str().unwrap_or_default().to_string(),
                    name.as_str().unwrap_or_default().to_string(),
                    arguments
                        .and_then(Value::as_str)
                        .unwrap_or("{}")
                        .to_string(),
                ));
            }
        }
        if role == "tool" {
            let id = required(
                message,
                "tool_call_id",
                &format!("{at}.tool_call_id"),
                Kind::Str,
            )?;
            turn.tool_call_id = Some(id.as_str().unwrap_or_default().to_string());
        }
        turns.push(turn);
    }
    Ok(turns)
}

/// What a request brings that is new: a user message, or results of the client's tools.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A user message.
    Message(String),
    /// `(call id, result)` for each call the client ran.
    ToolResults(Vec<(String, String)>),
}

/// Splits a conversation into the history the client got so far and its new input.
pub fn split(turns: &[Turn]) -> Result<(&[Turn], Input), OpenAiError> {
    let trailing_tools = turns.iter().rev().take_while(|t| t.role == "tool").count();
    if trailing_tools > 0 {
        let at = turns.len() - trailing_tools;
        let results = turns[at..]
            .iter()
            .map(|t| {
                (
                    t.tool_call_id.clone().unwrap_or_default(),
                    t.content.clone(),
                )
            })
            .collect();
        return Ok((&turns[..at], Input::ToolResults(results)));
    }
    match turns.last() {
        Some(last) if last.role == "user" => {
            if last.content.is_empty() {
                return Err(OpenAiError::invalid_param(
                    format!("messages[{}].content", turns.len() - 1),
                    "empty_message",
                    "the last user message is empty; send the user's text",
                ));
            }
            Ok((
                &turns[..turns.len() - 1],
                Input::Message(last.content.clone()),
            ))
        }
        _ => Err(OpenAiError::invalid_param(
            "messages",
            "invalid_conversation",
            "the conversation must end with a user message (or with tool results for the calls \
             the last answer asked for)",
        )),
    }
}

/// A map that forgets its oldest entries past a cap.
#[derive(Debug)]
pub struct Bounded<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    cap: usize,
}

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Bounded<K, V> {
    /// An empty map of at most `cap` entries.
    pub fn new(cap: usize) -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
        }
    }

    /// Adds or replaces an entry, forgetting the oldest past the cap.
    pub fn insert(&mut self, key: K, value: V) {
        if self.map.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }

    /// The entry under `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        self.map.get(key).cloned()
    }
}

/// The remembered conversations: digest -> session id.
#[derive(Debug)]
pub struct Conversations {
    inner: Mutex<Bounded<[u8; 32], String>>,
}

impl Default for Conversations {
    fn default() -> Self {
        Conversations {
            inner: Mutex::new(Bounded::new(REMEMBERED_CONVERSATIONS)),
        }
    }
}

impl Conversations {
    /// Remembers that the conversation `turns` goes on in `session`.
    pub fn remember(&self, turns: &[Turn], session: &str) {
        lock(&self.inner).insert(digest(turns), session.to_string());
    }

    /// The session a conversation `turns` belongs to, if it is remembered.
    pub fn find(&self, turns: &[Turn]) -> Option<String> {
        lock(&self.inner).get(&digest(turns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_splits_into_history_and_new_input() {
        let turns = vec![
            Turn::text("system", "be brief"),
            Turn::text("user", "hi"),
            Turn::text("assistant", "hello"),
            Turn::text("user", "again"),
        ];
        let (history, input) = split(&turns).unwrap();
        assert_eq!(history.len(), 3);
        assert_eq!(input, Input::Message("again".into()));
        let mut tool = Turn::text("tool", "42");
        tool.tool_call_id = Some("c1".into());
        let with_tool = vec![Turn::text("user", "q"), Turn::text("assistant", ""), tool];
        let (history, input) = split(&with_tool).unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(input, Input::ToolResults(vec![("c1".into(), "42".into())]));
        assert!(split(&[Turn::text("assistant", "x")]).is_err());
    }

    #[test]
    fn remembered_conversations_are_found_by_their_whole_history() {
        let conversations = Conversations::default();
        let a = vec![Turn::text("user", "hi"), Turn::text("assistant", "hello")];
        conversations.remember(&a, "s1");
        assert_eq!(conversations.find(&a).as_deref(), Some("s1"));
        let b = vec![Turn::text("user", "hi"), Turn::text("assistant", "hello!")];
        assert_eq!(conversations.find(&b), None);
        // Whitespace around text does not make another conversation.
        let c = vec![
            Turn::text("user", " hi\n"),
            Turn::text("assistant", "hello"),
        ];
        assert_eq!(conversations.find(&c).as_deref(), Some("s1"));
    }

    #[test]
    fn a_bounded_map_forgets_its_oldest_entries() {
        let mut map = Bounded::new(2);
        map.insert(1, "a");
        map.insert(2, "b");
        map.insert(1, "c");
        assert_eq!(map.get(&1), Some("c"));
        map.insert(3, "d");
        assert_eq!(map.get(&1), None);
        assert_eq!(map.get(&2), Some("b"));
        assert_eq!(map.get(&3), Some("d"));
    }
}
