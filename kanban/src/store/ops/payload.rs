//! Event payloads written straight to JSON text: a small object writer and the [`payload!`]
//! macro over it. An event's payload is only ever stored as text, so building a
//! `serde_json::Value` first (a map, an owned key and value per field) and printing it would
//! allocate for nothing; the text written here is the same, byte for byte, as
//! `json!({..}).to_string()` of the same fields in the same order.

use serde::Serialize;

/// A JSON object being written: fields in the order they are added.
#[derive(Debug)]
pub(crate) struct Payload {
    buf: Vec<u8>,
}

impl Payload {
    /// An empty object, with room for a typical payload.
    pub(crate) fn new() -> Payload {
        let mut buf = Vec::with_capacity(96);
        buf.push(b'{');
        Payload { buf }
    }

    /// Adds `"key":value`.
    pub(crate) fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> &mut Payload {
        if self.buf.len() > 1 {
            self.buf.push(b',');
        }
        // A string and the plain values of our events cannot fail to serialize; were one ever
        // to, the field reads `null` rather than the event being lost.
        if serde_json::to_writer(&mut self.buf, key).is_err() {
            self.buf.extend_from_slice(b"\"\"");
        }
        self.buf.push(b':');
        let mark = self.buf.len();
        if serde_json::to_writer(&mut self.buf, value).is_err() {
            self.buf.truncate(mark);
            self.buf.extend_from_slice(b"null");
        }
        self
    }

    /// The finished object's text.
    pub(crate) fn finish(mut self) -> String {
        self.buf.push(b'}');
        // serde_json writes UTF-8 only.
        String::from_utf8(self.buf)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

/// An event payload as JSON text: `payload!{"key": value, ...}`, each value anything
/// `Serialize` (borrowed, not moved).
macro_rules! payload {
    ($($key:literal : $value:expr),* $(,)?) => {{
        #[allow(unused_mut, reason = "an empty payload adds no field")]
        let mut p = $crate::store::ops::payload::Payload::new();
        $( p.field($key, &$value); )*
        p.finish()
    }};
}
pub(crate) use payload;

/// A value written as the JSON string of its `Display` text, without building that text first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shown<T>(pub(crate) T);

impl<T: std::fmt::Display> Serialize for Shown<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::WorkerId;

    #[test]
    fn a_payload_is_the_text_json_would_print() {
        let worker = WorkerId::local();
        let summary: Option<String> = None;
        let parents = vec!["t1", "t\"2"];
        assert_eq!(
            payload! {"lock": Shown(&worker), "expires": 17_i64, "run_id": -3_i64,
            "from": "ready", "summary": summary, "parents": parents,
            "text": "a \"quoted\"\nline é", "yes": true},
            json!({"lock": worker.to_string(), "expires": 17, "run_id": -3, "from": "ready",
                   "summary": summary, "parents": parents, "text": "a \"quoted\"\nline é",
                   "yes": true})
            .to_string()
        );
        assert_eq!(payload! {}, json!({}).to_string());
    }

    #[test]
    fn fields_added_one_by_one_keep_their_order() {
        let mut p = Payload::new();
        p.field("reason", "why").field("recurrences", &2_u32);
        p.field("limit", &3_u32);
        assert_eq!(p.finish(), r#"{"reason":"why","recurrences":2,"limit":3}"#);
    }
}
