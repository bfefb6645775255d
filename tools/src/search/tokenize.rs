//! The tokenizer shared by the index and the queries: ASCII letter-and-digit runs, lowercased,
//! then reduced with the Snowball English stemmer (3.x, through `frostem`). Used by
//! [`Catalog::build`](super::Catalog::build) and by every query; nothing else splits text.

use std::cell::RefCell;
use std::collections::HashMap;

use frostem::{Algorithm, Stemmer};

/// Stems remembered per thread before the memo is emptied; the reference keeps the same number.
const STEM_MEMO_CAPACITY: usize = 16_384;

thread_local! {
    /// Lowercased word -> stem. Words repeat a lot across tool descriptions and queries.
    static STEM_MEMO: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
}

/// Calls `each` with every `[A-Za-z0-9]+` run of `text`, as written (not lowercased).
pub fn for_each_raw_word(text: &str, mut each: impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_alphanumeric() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
            i += 1;
        }
        // ASCII bytes only, so both ends are char boundaries.
        each(&text[start..i]);
    }
}

/// Calls `each` with every `[A-Za-z0-9]+` run of `text`, lowercased. Any other character,
/// non-ASCII letters included, separates words; nothing is dropped as a stop word.
pub fn for_each_word(text: &str, mut each: impl FnMut(&str)) {
    let mut lowered = String::new();
    for_each_raw_word(text, |word| {
        if word.bytes().any(|b| b.is_ascii_uppercase()) {
            lowered.clear();
            lowered.push_str(word);
            lowered.make_ascii_lowercase();
            each(&lowered);
        } else {
            each(word);
        }
    });
}

/// The Snowball English stem of a lowercased ASCII word, memoised per thread.
pub fn stem(word: &str) -> String {
    STEM_MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        if let Some(found) = memo.get(word) {
            return found.clone();
        }
        let stemmed = Stemmer::new(Algorithm::English).stem(word).into_owned();
        // Emptying the memo when it is full keeps memory bounded; it refills with what is in use.
        if memo.len() >= STEM_MEMO_CAPACITY {
            memo.clear();
        }
        memo.insert(word.to_string(), stemmed.clone());
        stemmed
    })
}

/// The tokens of `text`, in order and with duplicates: each ASCII letter-and-digit run,
/// lowercased and stemmed. camelCase is not split (`createIssue` is one token) and `_ - . : /`
/// separate words only because they are not letters or digits.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    for_each_word(text, |word| tokens.push(stem(word)));
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_anything_but_ascii_letters_and_digits() {
        assert_eq!(
            tokenize("mcp__github__create_issue"),
            ["mcp", "github", "creat", "issu"]
        );
        assert_eq!(
            tokenize("notion.pages:create-page"),
            ["notion", "page", "creat", "page"]
        );
        assert_eq!(tokenize("café Straße 日本語"), ["caf", "stra", "e"]);
        assert_eq!(tokenize("x86_64 v1beta"), ["x86", "64", "v1beta"]);
        assert!(tokenize("  ?! ").is_empty());
    }

    #[test]
    fn camel_case_stays_one_token() {
        assert_eq!(
            tokenize("createIssue HTTPRequestV2"),
            ["createissu", "httprequestv2"]
        );
    }

    #[test]
    fn keeps_stop_words_and_duplicates() {
        assert_eq!(tokenize("the issues the"), ["the", "issu", "the"]);
    }

    #[test]
    fn uses_snowball_three() {
        // Snowball 2.x gives `ad` and `organ` here.
        assert_eq!(tokenize("added organization"), ["add", "organiz"]);
    }

    /// Every word of the recorded Snowball 3.1.1 sample, including the ones where 2.x differs.
    #[test]
    fn matches_snowball_3_1_1_on_every_recorded_word() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tool_search/data/stems_snowball_3_1_1.json"
        );
        let data: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut pairs: Vec<(String, String)> = data["stems"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(w, s)| (w.clone(), s.as_str().unwrap().to_string()))
            .collect();
        let differing = data["differs_from_2_2_0"].as_object().unwrap();
        assert_eq!(differing.len(), 24);
        pairs.extend(
            differing
                .iter()
                .map(|(w, v)| (w.clone(), v["3.1.1"].as_str().unwrap().to_string())),
        );
        assert!(
            pairs.len() > 1000,
            "the sample should be large, found {}",
            pairs.len()
        );
        let wrong: Vec<String> = pairs
            .iter()
            .filter_map(|(word, want)| {
                let got = tokenize(word);
                (got != [want.as_str()]).then(|| format!("{word}: want {want}, got {got:?}"))
            })
            .collect();
        assert!(
            wrong.is_empty(),
            "{} word(s) stem differently:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
    }

    #[test]
    fn memo_survives_being_full() {
        // Digit runs stem to themselves, so the expected value is known for each.
        for i in 0..(STEM_MEMO_CAPACITY + 10) {
            let word = i.to_string();
            assert_eq!(stem(&word), word);
        }
        assert_eq!(stem("running"), "run");
    }
}
