//! Registered names of MCP tools: `mcp_<server>_<tool>`, cut down to the characters model APIs
//! accept (`[A-Za-z0-9_-]`) and at most 64 of them. [`NameBook`] hands out these names across
//! all servers so two tools never share one; the manager and the connections use it.

use std::collections::{HashMap, HashSet};

/// Longest tool name model APIs accept.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// `mcp_<server>_<tool>` with every other character replaced by `_`, not yet length-limited.
pub fn raw_tool_name(server: &str, tool: &str) -> String {
    let mut out = String::with_capacity(5 + server.len() + tool.len());
    out.push_str("mcp_");
    push_sanitised(&mut out, server);
    out.push('_');
    push_sanitised(&mut out, tool);
    out
}

fn push_sanitised(out: &mut String, text: &str) {
    out.extend(text.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            c
        } else {
            '_'
        }
    }));
}

/// The name for `tool` of `server` when nothing else claims it: the raw name if it fits, or its
/// first characters plus a hash of the full name, so long names that share a prefix differ.
pub fn tool_name(server: &str, tool: &str) -> String {
    fit(
        &raw_tool_name(server, tool),
        &format!("{server}\u{0}{tool}"),
        "",
    )
}

/// Cuts `base` to fit with `suffix`, adding a hash of `key` when it had to be cut.
fn fit(base: &str, key: &str, suffix: &str) -> String {
    if base.len() + suffix.len() <= MAX_TOOL_NAME_LEN {
        return format!("{base}{suffix}");
    }
    let hash = format!("_{:08x}", fnv1a(key));
    // `base` is ASCII after sanitising, so byte slicing is safe.
    let keep = MAX_TOOL_NAME_LEN - hash.len() - suffix.len();
    format!("{}{hash}{suffix}", &base[..keep])
}

/// FNV-1a: stable across runs and Rust versions, unlike the std hasher.
fn fnv1a(text: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in text.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Which registered name belongs to which server's tool. A server's names are assigned in the
/// order of its sorted tool names; a name another server (or another of the same server's tools)
/// holds gets `_2`, `_3`, ... so the outcome depends only on the names, never on timing.
#[derive(Debug, Default)]
pub struct NameBook {
    /// Registered name -> (server, tool as the server calls it).
    owners: HashMap<String, (String, String)>,
}

impl NameBook {
    /// An empty book.
    pub fn new() -> Self {
        NameBook::default()
    }

    /// Gives `server`'s `tools` their names, releasing the names its previous list held.
    /// `taken` says whether a name is used outside MCP (a core or plugin tool). Returns
    /// (registered name, tool) pairs in the order of `tools`.
    pub fn assign(
        &mut self,
        server: &str,
        tools: &[String],
        taken: impl Fn(&str) -> bool,
    ) -> Vec<(String, String)> {
        self.release(server);
        let mut sorted: Vec<&String> = tools.iter().collect();
        sorted.sort();
        sorted.dedup();
        let mut given: HashMap<&str, String> = HashMap::new();
        let mut used_here: HashSet<String> = HashSet::new();
        for tool in sorted {
            let raw = raw_tool_name(server, tool);
            let key = format!("{server}\u{0}{tool}");
            let mut candidate = fit(&raw, &key, "");
            let mut n = 2;
            while self.owners.contains_key(&candidate)
                || used_here.contains(&candidate)
                || taken(&candidate)
            {
                candidate = fit(&raw, &key, &format!("_{n}"));
                n += 1;
            }
            used_here.insert(candidate.clone());
            given.insert(tool.as_str(), candidate);
        }
        let mut out = Vec::with_capacity(tools.len());
        for tool in tools {
            if let Some(name) = given.get(tool.as_str()) {
                self.owners
                    .insert(name.clone(), (server.to_string(), tool.clone()));
                out.push((name.clone(), tool.clone()));
            }
        }
        out
    }

    /// Forgets every name `server` held.
    pub fn release(&mut self, server: &str) {
        self.owners.retain(|_, (s, _)| s != server);
    }

    /// The server and tool behind a registered name.
    pub fn owner(&self, name: &str) -> Option<(&str, &str)> {
        self.owners.get(name).map(|(s, t)| (s.as_str(), t.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_are_sanitised() {
        assert_eq!(tool_name("git", "git_status"), "mcp_git_git_status");
        assert_eq!(
            tool_name("my.server", "get sum/2"),
            "mcp_my_server_get_sum_2"
        );
        assert_eq!(
            tool_name("everything", "get-tiny-image"),
            "mcp_everything_get-tiny-image"
        );
        assert_eq!(tool_name("é", "ü"), "mcp____");
    }

    #[test]
    fn long_names_are_cut_to_64_and_stay_distinct() {
        let long_a = format!("{}_a", "x".repeat(80));
        let long_b = format!("{}_b", "x".repeat(80));
        let a = tool_name("srv", &long_a);
        let b = tool_name("srv", &long_b);
        assert_eq!(a.len(), MAX_TOOL_NAME_LEN);
        assert_eq!(b.len(), MAX_TOOL_NAME_LEN);
        assert_ne!(a, b);
        assert_eq!(
            a,
            tool_name("srv", &long_a),
            "the same tool always gets the same name"
        );
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }

    #[test]
    fn collisions_get_numbered_suffixes_in_name_order() {
        let mut book = NameBook::new();
        let first = book.assign("s", &strings(&["a.b", "a_b"]), |_| false);
        // Sorted: "a.b" < "a_b", so "a.b" keeps the plain name whatever the input order.
        assert_eq!(
            first,
            vec![
                ("mcp_s_a_b".to_string(), "a.b".to_string()),
                ("mcp_s_a_b_2".to_string(), "a_b".to_string())
            ]
        );
        let mut other = NameBook::new();
        let reversed = other.assign("s", &strings(&["a_b", "a.b"]), |_| false);
        assert_eq!(reversed[0], ("mcp_s_a_b_2".to_string(), "a_b".to_string()));
    }

    #[test]
    fn names_held_by_other_servers_or_tools_are_not_reused() {
        let mut book = NameBook::new();
        book.assign("a", &strings(&["b_c"]), |_| false);
        let second = book.assign("a_b", &strings(&["c"]), |_| false);
        assert_eq!(second[0].0, "mcp_a_b_c_2");
        let third = book.assign("z", &strings(&["t"]), |n| n == "mcp_z_t");
        assert_eq!(third[0].0, "mcp_z_t_2");
        assert_eq!(book.owner("mcp_a_b_c"), Some(("a", "b_c")));
        // Re-assigning a server keeps its own names stable.
        let again = book.assign("a", &strings(&["b_c"]), |_| false);
        assert_eq!(again[0].0, "mcp_a_b_c");
        book.release("a");
        assert_eq!(book.owner("mcp_a_b_c"), None);
    }
}
