//! What the session says back to replies that are not answers: the nudge after an empty
//! reply, and the error for a call to a tool that does not exist, naming the close ones (small
//! models misspell names, drop a server prefix, or call a deferred tool by its short name).

use troupe_tools::{ToolSearchConfig, ToolsetView};

/// Sent (once per turn) after a reply with no text and no tool call.
pub const EMPTY_REPLY_NUDGE: &str = "Your last reply was empty. Answer the request above in plain text, or call one of your tools if you need one.";

/// Most names one error suggests.
const MAX_SUGGESTIONS: usize = 5;

/// The error for a call to `name`, which this session's view does not hold.
pub fn unknown_tool_message(name: &str, view: &ToolsetView, config: &ToolSearchConfig) -> String {
    let names: Vec<&str> = view.tools().iter().map(|d| d.name.as_str()).collect();
    let close = close_names(name, &names);
    let mut message = format!("There is no tool called '{name}' in this session; nothing was run.");
    if close.is_empty() {
        message.push_str(" Call one of the tools you were given");
        if view.contains("tool_search") {
            message.push_str(", or find one with tool_search");
        }
        message.push('.');
        return message;
    }
    let shown: Vec<String> = close.iter().map(|n| format!("'{n}'")).collect();
    message.push_str(&format!(" Close names: {}.", shown.join(", ")));
    if close.iter().any(|n| view.is_deferred(n, &config.defer)) && view.contains("tool_call") {
        message.push_str(
            " A tool that is not in your list runs through tool_call with its exact name.",
        );
    }
    message
}

/// The names in `candidates` close to `wanted`, closest first: the same apart from case and
/// `-`/`_`, a prefixed form (`mcp_server_wanted`), one containing the other, or a few edits
/// apart.
pub(crate) fn close_names<'a>(wanted: &str, candidates: &[&'a str]) -> Vec<&'a str> {
    let wanted = normalise(wanted);
    if wanted.is_empty() {
        return Vec::new();
    }
    let allowed = (wanted.chars().count() / 4).clamp(1, 3);
    let mut scored: Vec<(usize, &str)> = candidates
        .iter()
        .filter_map(|candidate| {
            let plain = normalise(candidate);
            let score = if plain == wanted {
                0
            } else if plain.ends_with(&format!("_{wanted}")) {
                1
            } else if wanted.len() >= 3 && (plain.contains(&wanted) || wanted.contains(&plain)) {
                2
            } else {
                let distance = edit_distance(&plain, &wanted);
                if distance > allowed {
                    return None;
                }
                2 + distance
            };
            Some((score, *candidate))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, n)| n)
        .collect()
}

fn normalise(name: &str) -> String {
    name.trim()
        .to_lowercase()
        .chars()
        .map(|c| if matches!(c, '-' | ' ' | '.') { '_' } else { c })
        .collect()
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_catch_typos_prefixes_and_parts() {
        let names = [
            "read_file",
            "write_file",
            "search_files",
            "mcp_everything_get-sum",
            "terminal",
        ];
        assert_eq!(
            close_names("readfile", &names),
            vec!["read_file"],
            "one edit away"
        );
        assert_eq!(close_names("Read-File", &names)[0], "read_file");
        assert_eq!(
            close_names("get_sum", &names),
            vec!["mcp_everything_get-sum"]
        );
        assert_eq!(close_names("terminal_run", &names), vec!["terminal"]);
        assert!(close_names("multiply", &names).is_empty());
        assert!(close_names("", &names).is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
