//! What an MCP `tools/call` answer becomes: text, image, audio, embedded resources and resource
//! links map onto [`ToolResult`] content, structured content is kept, and `isError` results
//! become error results carrying the server's own text. Used by the tool handler.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

use crate::tool::{Content, ToolResult};

/// Maps a completed call. `server` and `tool` only shape the message of an empty error result.
pub(crate) fn map_call_result(server: &str, tool: &str, result: CallToolResult) -> ToolResult {
    let is_error = result.is_error.unwrap_or(false);
    let mut content: Vec<Content> = result.content.into_iter().map(map_block).collect();
    if content.is_empty() {
        match (&result.structured_content, is_error) {
            (Some(value), _) => content.push(Content::Text(value.to_string())),
            (None, true) => content.push(Content::Text(format!(
                "The MCP server '{server}' reported that tool '{tool}' failed, without saying why. Check the server's log, or try other arguments."
            ))),
            (None, false) => {}
        }
    }
    ToolResult {
        content,
        structured: result.structured_content,
        is_error,
    }
}

fn map_block(block: ContentBlock) -> Content {
    match block {
        ContentBlock::Text(text) => Content::Text(text.text),
        ContentBlock::Image(image) => Content::Image {
            data: image.data,
            mime_type: image.mime_type,
        },
        // troupe's content has no audio part; say what arrived rather than inline the bytes.
        ContentBlock::Audio(audio) => Content::Text(format!(
            "[audio {}, {} base64 bytes, not shown]",
            audio.mime_type,
            audio.data.len()
        )),
        ContentBlock::Resource(embedded) => match embedded.resource {
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text,
                ..
            } => Content::Resource {
                uri,
                text: Some(text),
                mime_type,
            },
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => match mime_type {
                Some(mime) if mime.starts_with("image/") => Content::Image {
                    data: blob,
                    mime_type: mime,
                },
                mime_type => Content::Resource {
                    uri,
                    text: None,
                    mime_type,
                },
            },
            #[allow(unreachable_patterns, reason = "rmcp may add resource kinds")]
            other => Content::Text(
                serde_json::to_string(&other).unwrap_or_else(|_| "[unreadable resource]".into()),
            ),
        },
        ContentBlock::ResourceLink(link) => Content::Resource {
            uri: link.uri,
            text: None,
            mime_type: link.mime_type,
        },
        // ContentBlock is non-exhaustive: keep whatever a newer server sends as its JSON.
        #[allow(unreachable_patterns, reason = "rmcp may add content kinds")]
        other => Content::Text(
            serde_json::to_string(&other).unwrap_or_else(|_| "[unreadable content]".into()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ContentBlock, ResourceContents};
    use serde_json::json;

    #[test]
    fn every_kind_of_content_maps() {
        let mut result = CallToolResult::success(vec![
            ContentBlock::text("hello"),
            ContentBlock::image("AAAA", "image/png"),
            ContentBlock::resource(ResourceContents::text("body", "file:///a.txt")),
            ContentBlock::audio("BBBB", "audio/wav"),
        ]);
        result.structured_content = Some(json!({"n": 1}));
        let mapped = map_call_result("s", "t", result);
        assert!(!mapped.is_error);
        assert_eq!(mapped.content[0], Content::Text("hello".into()));
        assert_eq!(
            mapped.content[1],
            Content::Image {
                data: "AAAA".into(),
                mime_type: "image/png".into()
            }
        );
        assert!(
            matches!(&mapped.content[2], Content::Resource { uri, text: Some(t), .. } if uri == "file:///a.txt" && t == "body")
        );
        assert!(matches!(&mapped.content[3], Content::Text(t) if t.contains("audio/wav")));
        assert_eq!(mapped.structured, Some(json!({"n": 1})));
    }

    #[test]
    fn error_results_keep_the_server_text() {
        let mapped = map_call_result(
            "s",
            "t",
            CallToolResult::error(vec![ContentBlock::text("disk full")]),
        );
        assert!(mapped.is_error);
        assert_eq!(mapped.to_model_text(), "disk full");
        let empty = map_call_result("s", "t", CallToolResult::error(vec![]));
        assert!(empty.is_error);
        assert!(empty.to_model_text().contains("'t' failed"));
    }
}
