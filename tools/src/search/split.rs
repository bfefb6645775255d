//! Word splitting for the hybrid ranking: what a person reads as separate words in a tool name
//! or a query. Besides every character that is not an ASCII letter or digit (`_`, `__`, `-`, `.`,
//! spaces), it splits camelCase and PascalCase (`getConsoleErrors` → get, console, errors; an
//! acronym ends before its last capital: `HTTPRequest` → http, request) and letters from digits
//! (`v2beta` → v, 2, beta). The reference ranking does none of this; see [`super::tokenize`].

/// Calls `each` with every word of `text`, lowercased, in order.
pub fn for_each_split_word(text: &str, mut each: impl FnMut(&str)) {
    let mut lowered = String::new();
    super::tokenize::for_each_raw_word(text, |run| {
        let bytes = run.as_bytes();
        let mut start = 0;
        for i in 1..bytes.len() {
            let (prev, cur) = (bytes[i - 1], bytes[i]);
            let next = bytes.get(i + 1).copied();
            let boundary = (prev.is_ascii_lowercase() && cur.is_ascii_uppercase())
                || (prev.is_ascii_digit() != cur.is_ascii_digit())
                // The last capital of an acronym starts the next word: `HTTPRequest`.
                || (prev.is_ascii_uppercase()
                    && cur.is_ascii_uppercase()
                    && next.is_some_and(|n| n.is_ascii_lowercase()));
            if boundary {
                emit(&run[start..i], &mut lowered, &mut each);
                start = i;
            }
        }
        emit(&run[start..], &mut lowered, &mut each);
    });
}

fn emit(word: &str, lowered: &mut String, each: &mut impl FnMut(&str)) {
    // Most words are lowercase already: they go out as they are, without a copy.
    if !word.bytes().any(|b| b.is_ascii_uppercase()) {
        each(word);
        return;
    }
    lowered.clear();
    lowered.push_str(word);
    lowered.make_ascii_lowercase();
    each(lowered);
}

/// The words of `text` as [`for_each_split_word`] gives them.
pub fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    for_each_split_word(text, |w| words.push(w.to_string()));
    words
}

#[cfg(test)]
mod tests {
    use super::split_words;

    #[test]
    fn splits_camel_and_pascal_case() {
        assert_eq!(
            split_words("getConsoleErrors"),
            ["get", "console", "errors"]
        );
        assert_eq!(
            split_words("StartMastraCourseLesson"),
            ["start", "mastra", "course", "lesson"]
        );
        assert_eq!(split_words("HTTPRequestV2"), ["http", "request", "v", "2"]);
        assert_eq!(split_words("parseJSON"), ["parse", "json"]);
    }

    #[test]
    fn splits_separators_and_digits() {
        assert_eq!(
            split_words("mcp__github__create_issue"),
            ["mcp", "github", "create", "issue"]
        );
        assert_eq!(split_words("API-post-page"), ["api", "post", "page"]);
        assert_eq!(
            split_words("x86_64 v1beta"),
            ["x", "86", "64", "v", "1", "beta"]
        );
        assert_eq!(split_words("web-01"), ["web", "01"]);
        assert!(split_words(" -_ ").is_empty());
    }

    #[test]
    fn lowercase_words_stay_whole() {
        assert_eq!(split_words("sequentialthinking"), ["sequentialthinking"]);
        assert_eq!(split_words("café"), ["caf"]);
    }
}
