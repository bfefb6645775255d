//! The names of hosted connector tools: `connectors__<connector>__<tool>`. A gateway knows a tool
//! by a vendor slug (`GMAIL_SEND_EMAIL`); the name drops the connector's own prefix from it, so
//! the model reads `connectors__gmail__SEND_EMAIL`.

/// Name prefix of hosted connector tools.
pub const CONNECTOR_PREFIX: &str = "connectors__";

/// Whether `name` names a hosted connector tool (a prefix test: malformed names count too, and
/// are refused when they run).
pub fn is_connector_name(name: &str) -> bool {
    name.starts_with(CONNECTOR_PREFIX)
}

/// `connectors__<connector>__<slug>`, with `<CONNECTOR>_` stripped from the front of `slug`.
/// The connector is used as given: the search leg lowercases it first.
pub fn format_connector_name(connector: &str, slug: &str) -> String {
    let prefix = format!("{}_", connector.to_uppercase());
    let tool = slug.strip_prefix(&prefix).unwrap_or(slug);
    format!("{CONNECTOR_PREFIX}{connector}__{tool}")
}

/// `(connector, tool)` of a well-formed connector name: exactly three `__`-separated parts
/// (the tool part may hold further `__`), the first `connectors`, the others non-empty.
pub fn parse_connector_name(name: &str) -> Option<(&str, &str)> {
    let mut parts = name.splitn(3, "__");
    let (Some("connectors"), Some(connector), Some(tool)) =
        (parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    (!connector.is_empty() && !tool.is_empty()).then_some((connector, tool))
}

/// The slugs a gateway may know the tool by, the conventional one first:
/// `(<CONNECTOR>_<tool>, <tool>)`.
pub fn vendor_slug_candidates(connector: &str, tool: &str) -> (String, String) {
    (
        format!("{}_{tool}", connector.to_uppercase()),
        tool.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendor_prefix_is_dropped_once() {
        assert_eq!(
            format_connector_name("gmail", "GMAIL_SEND_EMAIL"),
            "connectors__gmail__SEND_EMAIL"
        );
        assert_eq!(
            format_connector_name("gmail", "SEND_EMAIL"),
            "connectors__gmail__SEND_EMAIL"
        );
        assert_eq!(
            format_connector_name("linear", "LINEAR_LINEAR_X"),
            "connectors__linear__LINEAR_X"
        );
    }

    #[test]
    fn parsing_needs_three_non_empty_parts() {
        assert_eq!(
            parse_connector_name("connectors__gmail__SEND_EMAIL"),
            Some(("gmail", "SEND_EMAIL"))
        );
        assert_eq!(
            parse_connector_name("connectors__a__b__c"),
            Some(("a", "b__c"))
        );
        for bad in [
            "connectors__gmail",
            "connectors____X",
            "connectors__g__",
            "mcp__a__b",
        ] {
            assert_eq!(parse_connector_name(bad), None, "{bad}");
        }
        assert_eq!(
            vendor_slug_candidates("gmail", "SEND_EMAIL"),
            ("GMAIL_SEND_EMAIL".to_string(), "SEND_EMAIL".to_string())
        );
    }
}
