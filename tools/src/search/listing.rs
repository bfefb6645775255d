//! The catalog listing appended to the `tool_search` description: every deferred tool grouped by
//! source, in the richest form that fits a token budget (full lines, then names only, then
//! source by source collapsed to a one-line summary, largest first). Also `short_desc`, the
//! one-line description of a listing entry. Built by [`Catalog::listing`](super::Catalog::listing).

use super::catalog::{CHARS_PER_TOKEN, Catalog};

/// Longest short description in a full listing line, in characters.
pub const SHORT_DESC_MAX_CHARS: usize = 60;

/// The first line of every listing.
pub const LISTING_HEADER: &str =
    "Tools loaded on demand (get a schema with `tool_describe`, run with `tool_call`):";

/// What follows `"{label} ({n}"` in a collapsed group. The `mixed` preface of the `tool_search`
/// description refers to its "names left out" wording.
pub const SUMMARY_SUFFIX: &str = " tools, names left out; find them using `tool_search`)";

/// How much of the catalog a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListingForm {
    /// Every tool with its short description.
    Full,
    /// Every tool by name.
    Names,
    /// Some sources by name, the others as one-line summaries.
    Mixed,
    /// Every source as a one-line summary.
    Groups,
    /// No listing.
    None,
}

impl ListingForm {
    /// The word used in outputs (`full`, `names`, `mixed`, `groups`, `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            ListingForm::Full => "full",
            ListingForm::Names => "names",
            ListingForm::Mixed => "mixed",
            ListingForm::Groups => "groups",
            ListingForm::None => "none",
        }
    }

    /// The tier it puts the assembly in: 1 when every tool's name is visible somewhere, else 2.
    pub fn tier(self) -> u8 {
        match self {
            ListingForm::Full | ListingForm::Names | ListingForm::Mixed => 1,
            ListingForm::Groups | ListingForm::None => 2,
        }
    }
}

/// A listing: its form and its text (none for [`ListingForm::None`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// How much it shows.
    pub form: ListingForm,
    /// The text, header first, lines joined by `\n`, no trailing newline.
    pub text: Option<String>,
}

impl Listing {
    /// No listing at all.
    pub fn none() -> Listing {
        Listing {
            form: ListingForm::None,
            text: None,
        }
    }
}

/// Estimated tokens of a text of `chars` code points: a quarter, rounded up.
pub fn estimate_tokens(chars: usize) -> i64 {
    chars.div_ceil(CHARS_PER_TOKEN) as i64
}

/// A description reduced to one listing line: whitespace runs collapsed, cut after the first
/// sentence, and if still over 60 characters cut at the last space of its first 60, stripped of
/// trailing `, ; :` and marked with `…`.
///
/// A sentence ends at `.`, `!` or `?` followed by a space or the end, unless the mark closes
/// `e.g`, `i.e` or `etc` (so `1.2.3` and `x.y/z.` do not end one before the space).
pub fn short_desc(description: &str) -> String {
    let words: Vec<&str> = description
        .split(is_py_space)
        .filter(|w| !w.is_empty())
        .collect();
    let collapsed = words.join(" ");
    let sentence = first_sentence(&collapsed);
    let Some((cut, _)) = sentence.char_indices().nth(SHORT_DESC_MAX_CHARS) else {
        return sentence.to_string();
    };
    let head = &sentence[..cut];
    let head = match head.rfind(' ') {
        Some(space) => &head[..space],
        None => head,
    };
    format!("{}…", head.trim_end_matches([',', ';', ':', ' ']))
}

/// Whitespace as Python's `str.split()` sees it: Unicode whitespace plus the four ASCII
/// information separators.
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn first_sentence(text: &str) -> &str {
    for (i, c) in text.char_indices() {
        if !matches!(c, '.' | '!' | '?') {
            continue;
        }
        let end = i + c.len_utf8();
        let at_break = text[end..].chars().next().is_none_or(is_py_space);
        if at_break && !closes_abbreviation(&text[..i]) {
            return &text[..end];
        }
    }
    text
}

/// Whether `before` (the text up to a mark) ends with `e.g`, `i.e` or `etc` as a whole word.
fn closes_abbreviation(before: &str) -> bool {
    ["e.g", "i.e", "etc"].iter().any(|abbr| {
        before.strip_suffix(abbr).is_some_and(|rest| {
            rest.chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        })
    })
}

/// The blocks a listing is made of, with their lengths, computed once per catalog.
#[derive(Debug)]
pub(crate) struct ListingGroups {
    groups: Vec<Group>,
}

#[derive(Debug)]
struct Group {
    label: String,
    /// `(name, short description)`, sorted.
    tools: Vec<(String, String)>,
    /// Code points of the block in each form.
    full_len: usize,
    names_len: usize,
    summary_len: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Full,
    Names,
    Summary,
}

impl Group {
    fn title(&self) -> String {
        format!("{} tools ({}):", self.label, self.tools.len())
    }

    fn summary(&self) -> String {
        format!("{} ({}{SUMMARY_SUFFIX}", self.label, self.tools.len())
    }

    fn len(&self, shape: Shape) -> usize {
        match shape {
            Shape::Full => self.full_len,
            Shape::Names => self.names_len,
            Shape::Summary => self.summary_len,
        }
    }

    fn write(&self, shape: Shape, out: &mut String) {
        match shape {
            Shape::Full => {
                out.push_str(&self.title());
                for (name, short) in &self.tools {
                    out.push_str("\n- ");
                    out.push_str(name);
                    if !short.is_empty() {
                        out.push_str(": ");
                        out.push_str(short);
                    }
                }
            }
            Shape::Names => {
                out.push_str(&self.title());
                out.push('\n');
                for (i, (name, _)) in self.tools.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(name);
                }
            }
            Shape::Summary => out.push_str(&self.summary()),
        }
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

impl ListingGroups {
    /// Groups `defs` by their source label.
    pub(crate) fn new(catalog: &Catalog) -> ListingGroups {
        let mut by_label: std::collections::BTreeMap<&str, Vec<(String, String)>> =
            Default::default();
        for (doc, def) in catalog.defs().iter().enumerate() {
            by_label
                .entry(catalog.source(doc).label.as_str())
                .or_default()
                .push((def.name.clone(), short_desc(def.description())));
        }
        let groups = by_label
            .into_iter()
            .map(|(label, mut tools)| {
                tools.sort();
                let mut group = Group {
                    label: label.to_string(),
                    tools,
                    full_len: 0,
                    names_len: 0,
                    summary_len: 0,
                };
                let title = chars(&group.title());
                group.full_len = title
                    + group
                        .tools
                        .iter()
                        .map(|(n, s)| 3 + chars(n) + if s.is_empty() { 0 } else { 2 + chars(s) })
                        .sum::<usize>();
                group.names_len = title
                    + 1
                    + group.tools.iter().map(|(n, _)| chars(n)).sum::<usize>()
                    + 2 * group.tools.len().saturating_sub(1);
                group.summary_len = chars(&group.summary());
                group
            })
            .collect();
        ListingGroups { groups }
    }

    fn total(&self, shapes: &[Shape]) -> usize {
        let header = chars(LISTING_HEADER);
        header
            + self
                .groups
                .iter()
                .zip(shapes)
                .map(|(g, &s)| 1 + g.len(s))
                .sum::<usize>()
    }

    fn text(&self, shapes: &[Shape]) -> String {
        let mut out = String::from(LISTING_HEADER);
        for (group, &shape) in self.groups.iter().zip(shapes) {
            out.push('\n');
            group.write(shape, &mut out);
        }
        out
    }

    /// The richest listing that fits `max_tokens`: all full; else all names; else names with
    /// groups collapsed one at a time (longest names block first, ties by label) until it fits.
    pub(crate) fn render(&self, max_tokens: i64) -> Listing {
        if self.groups.is_empty() {
            return Listing::none();
        }
        let fits = |chars: usize| estimate_tokens(chars) <= max_tokens;
        let n = self.groups.len();
        for (shape, form) in [
            (Shape::Full, ListingForm::Full),
            (Shape::Names, ListingForm::Names),
        ] {
            let shapes = vec![shape; n];
            if fits(self.total(&shapes)) {
                return Listing {
                    form,
                    text: Some(self.text(&shapes)),
                };
            }
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| {
            let (ga, gb) = (&self.groups[a], &self.groups[b]);
            gb.names_len
                .cmp(&ga.names_len)
                .then_with(|| ga.label.cmp(&gb.label))
        });
        let mut shapes = vec![Shape::Names; n];
        let mut total = self.total(&shapes);
        for (collapsed, &g) in order.iter().enumerate() {
            shapes[g] = Shape::Summary;
            // Add before subtracting: the total always includes this group's names block.
            total += self.groups[g].summary_len;
            total -= self.groups[g].names_len;
            if fits(total) {
                let form = if collapsed + 1 == n {
                    ListingForm::Groups
                } else {
                    ListingForm::Mixed
                };
                return Listing {
                    form,
                    text: Some(self.text(&shapes)),
                };
            }
        }
        Listing::none()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::tool::ToolDef;

    #[test]
    fn short_desc_sentence_rules() {
        assert_eq!(short_desc("Open an issue. Then more."), "Open an issue.");
        assert_eq!(short_desc("  Spaced\n\tout   text  "), "Spaced out text");
        assert_eq!(
            short_desc("Use e.g. this or i.e. that, etc. Done. Tail"),
            "Use e.g. this or i.e. that, etc. Done."
        );
        assert_eq!(
            short_desc("Version 1.2.3 of https://x.y/z. More"),
            "Version 1.2.3 of https://x.y/z."
        );
        assert_eq!(short_desc("Really? Yes"), "Really?");
        assert_eq!(short_desc("Ends with a mark!"), "Ends with a mark!");
        // `fe.g` is not the abbreviation: the mark after it ends the sentence.
        assert_eq!(short_desc("Safe.g. next"), "Safe.g.");
        assert_eq!(short_desc(""), "");
    }

    #[test]
    fn short_desc_cuts_long_sentences_at_a_space() {
        let long = "Returns the full list of every widget in the workspace, sorted, with counts";
        let got = short_desc(long);
        assert_eq!(
            got,
            "Returns the full list of every widget in the workspace…"
        );
        assert!(got.chars().count() <= SHORT_DESC_MAX_CHARS + 1);
        let comma = "Alpha beta gamma delta epsilon zeta eta theta iota kappa, lambda mu nu";
        assert_eq!(
            short_desc(comma),
            "Alpha beta gamma delta epsilon zeta eta theta iota kappa…"
        );
        let solid = "x".repeat(70);
        assert_eq!(short_desc(&solid), format!("{}…", "x".repeat(60)));
        let exactly = "y".repeat(60);
        assert_eq!(short_desc(&exactly), exactly);
    }

    fn catalog(tools: &[(&str, &str)]) -> Catalog {
        Catalog::build(
            tools
                .iter()
                .map(|(name, ts)| {
                    Arc::new(
                        ToolDef::new(*name, format!("Does {name}."), json!({})).with_toolset(*ts),
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn forms_degrade_in_order() {
        let c = catalog(&[
            ("b_one", "mcp-bbb"),
            ("a_one", "mcp-aaa"),
            ("a_two", "mcp-aaa"),
            ("c_one", "plug"),
        ]);
        let full = c.listing(10_000);
        assert_eq!(full.form, ListingForm::Full);
        let text = full.text.unwrap();
        assert_eq!(
            text,
            format!(
                "{LISTING_HEADER}\naaa tools (2):\n- a_one: Does a_one.\n- a_two: Does a_two.\nbbb tools (1):\n- b_one: Does b_one.\nplug tools (1):\n- c_one: Does c_one."
            )
        );
        let names_len = chars(&format!(
            "{LISTING_HEADER}\naaa tools (2):\na_one, a_two\nbbb tools (1):\nb_one\nplug tools (1):\nc_one"
        ));
        let names = c.listing(estimate_tokens(names_len));
        assert_eq!(names.form, ListingForm::Names);
        assert_eq!(chars(names.text.as_deref().unwrap()), names_len);
        // Every summary here is longer than its names block, so collapsing cannot help.
        assert_eq!(
            c.listing(estimate_tokens(names_len) - 1).form,
            ListingForm::None
        );
        assert_eq!(c.listing(0), Listing::none());
    }

    #[test]
    fn collapses_the_longest_names_block_first_ties_by_label() {
        // Two big groups of equal names length and one small one.
        let mut tools = Vec::new();
        let big_a: Vec<String> = (0..20).map(|i| format!("alpha_operation_{i:02}")).collect();
        let big_b: Vec<String> = (0..20).map(|i| format!("bravo_operation_{i:02}")).collect();
        for n in &big_a {
            tools.push((n.as_str(), "mcp-alpha"));
        }
        for n in &big_b {
            tools.push((n.as_str(), "mcp-bravo"));
        }
        tools.push(("z", "mcp-zed"));
        let c = catalog(&tools);
        let groups = ListingGroups::new(&c);
        let names = groups.total(&[Shape::Names; 3]);
        let one = groups.total(&[Shape::Summary, Shape::Names, Shape::Names]);
        let two = groups.total(&[Shape::Summary, Shape::Summary, Shape::Names]);
        let three = groups.total(&[Shape::Summary; 3]);
        assert!(
            one < names && two < one && three > two,
            "the small group's summary is longer than its names"
        );
        // Room for one collapse: alpha goes first (equal length, label first), bravo stays.
        let listing = c.listing(estimate_tokens(one));
        assert_eq!(listing.form, ListingForm::Mixed);
        let text = listing.text.unwrap();
        assert!(text.contains(&format!("alpha (20{SUMMARY_SUFFIX}")));
        assert!(text.contains("bravo tools (20):\nbravo_operation_00, "));
        // Room for two: still mixed, since the single-tool group keeps its shorter names block.
        assert_eq!(c.listing(estimate_tokens(two)).form, ListingForm::Mixed);
        assert_eq!(c.listing(estimate_tokens(two) - 1).form, ListingForm::None);
    }

    #[test]
    fn groups_form_when_every_summary_is_needed() {
        let mut tools = Vec::new();
        let names: Vec<String> = (0..30)
            .map(|i| format!("long_tool_name_number_{i:02}"))
            .collect();
        for n in &names {
            tools.push((
                n.as_str(),
                if n.ends_with(['0', '2', '4', '6', '8']) {
                    "mcp-even"
                } else {
                    "mcp-odd"
                },
            ));
        }
        let c = catalog(&tools);
        let groups = ListingGroups::new(&c);
        let all = groups.total(&[Shape::Summary; 2]);
        let listing = c.listing(estimate_tokens(all));
        assert_eq!(listing.form, ListingForm::Groups);
        assert_eq!(listing.form.tier(), 2);
        assert_eq!(chars(listing.text.as_deref().unwrap()), all);
    }
}
