//! Masks secrets in text before it is kept or shown: troupe's own secret values (plain in any
//! case, reversed, and in the base64, hex and URL encodings a script would use to sneak them
//! out), vendor API keys and
//! tokens by their prefixes, `NAME=value` assignments whose name says secret (in any case),
//! authorization headers, private-key blocks, passwords in database URLs and JWTs. Tool output,
//! receipts and what `process` shows from a background process's output go through [`redact`].

use std::sync::{Arc, LazyLock, Mutex};

use regex::{Captures, Regex};

/// Builds a built-in pattern; a pattern that fails to compile is logged and matches nothing.
fn pattern(source: &str) -> Regex {
    match Regex::new(source) {
        Ok(re) => re,
        Err(err) => {
            tracing::error!(%err, "a built-in redaction pattern failed to compile");
            #[allow(clippy::unwrap_used)]
            Regex::new(r"[^\s\S]").unwrap()
        }
    }
}

static VENDOR: LazyLock<Regex> = LazyLock::new(|| {
    pattern(concat!(
        r"\b(?:sk-(?:proj-|ant-(?:api\d\d-)?|or-v1-)?[A-Za-z0-9_-]{16,}",
        r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{22,}",
        r"|xox[abposr]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}",
        r"|AIza[0-9A-Za-z_-]{30,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}",
        r"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",
        r"|hf_[A-Za-z0-9]{20,}|r8_[A-Za-z0-9]{20,}|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_-]{30,}",
        r"|gl(?:pat|dt|rt|ptt|cbt|imt|soat|ffct)-[A-Za-z0-9_-]{20,}",
        r"|xai-[A-Za-z0-9]{20,}|gsk_[A-Za-z0-9]{20,}|tvly-[A-Za-z0-9-]{16,}|exa_[A-Za-z0-9]{16,}",
        r"|pplx-[A-Za-z0-9]{20,}|fal_[A-Za-z0-9_-]{16,}|fc-[A-Za-z0-9]{20,}|ntn_[A-Za-z0-9]{20,}",
        r"|[ps]k-lf-[A-Za-z0-9-]{16,})\b"
    ))
});
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r#"\b([A-Z][A-Z0-9_]*?(?:API_?KEY|_KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|_PW|CREDENTIALS?|AUTH)[A-Z0-9_]*)(\s*[=:]\s*)(["']?)([^\s"'#,;]+)"#,
    )
});
/// The same in any case, for `password=hunter2` in lower case: only the strong secret words,
/// and the value must follow the `=` or `:` directly, so prose like "the password= field" and
/// code like `key=len` stay as they are.
static ASSIGNMENT_ANY_CASE: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r#"(?i)\b([a-z0-9_.-]*(?:password|passwd|secret|token|api_?key|access_?key|private_?key|credentials?)[a-z0-9_]*)([=:])(["']?)([^\s"'#,;&]+)"#,
    )
});
static JSON_FIELD: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r#"(?i)(\\?"(?:[a-z0-9_]*?)(?:api_?key|token|secret|password|passwd|credential|auth)[a-z0-9_]*\\?"\s*:\s*\\?")([^"\\]{4,})"#,
    )
});
static YAML_FIELD: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r#"(?im)^(\s*[a-z0-9_.-]*(?:api_?key|token|secret|password|passwd)[a-z0-9_]*\s*:\s*)(["']?)([^\s"'#]{4,})"#,
    )
});
static AUTH_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(?i)\b((?:proxy-)?authorization\s*:\s*(?:(?:bearer|basic|token|digest)\s+)?)([^\s\x22']+)",
    )
});
static KEY_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(?i)\b((?:x-api-key|x-goog-api-key|api-key|apikey|x-api-token|x-auth-token|x-access-token)\s*:\s*)([^\s\x22']+)",
    )
});
static PRIVATE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
    )
});
static DB_URL: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(?i)\b((?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?)://[^:/@\s]*:)([^@\s]+)(@)",
    )
});
static URL_TOKEN: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"\b(https?://)([A-Za-z0-9_-]{20,})(@)"));
static JWT: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"));
static TELEGRAM: LazyLock<Regex> = LazyLock::new(|| pattern(r"\b\d{8,10}:[A-Za-z0-9_-]{35}\b"));

/// How a secret is shown once masked: short ones entirely hidden, long ones keep a few
/// characters at each end so a person can tell which key it was.
pub fn mask(secret: &str) -> String {
    let count = secret.chars().count();
    if count < 18 {
        return "***".to_string();
    }
    let head: String = secret.chars().take(6).collect();
    let tail: String = secret.chars().skip(count - 4).collect();
    format!("{head}...{tail}")
}

/// Whether an assigned value is worth masking: not a number, a variable or a path.
fn looks_secret(value: &str) -> bool {
    !(value.len() < 4
        || value.chars().all(|c| c.is_ascii_digit())
        || value.starts_with('$')
        || value.starts_with('/')
        || value.starts_with("os.")
        || value.eq_ignore_ascii_case("true")
        || value.eq_ignore_ascii_case("false")
        || value.eq_ignore_ascii_case("none")
        || value.eq_ignore_ascii_case("null")
        || value.starts_with("***"))
}

/// `text` with every secret the patterns know masked.
pub fn redact(text: &str) -> String {
    redact_with(text, &OwnSecrets::current())
}

/// [`redact`] with troupe's own secrets as read once in `own`, for masking many texts (a batch
/// of spans) with one reading of the environment.
pub fn redact_with(text: &str, own: &OwnSecrets) -> String {
    let own = own.redact(text);
    let text = PRIVATE_KEY.replace_all(
        &own,
        "-----BEGIN ${1}PRIVATE KEY----- [private key redacted] -----END ${1}PRIVATE KEY-----",
    );
    let text = DB_URL.replace_all(&text, |c: &Captures| {
        format!("{}{}{}", &c[1], mask(&c[2]), &c[3])
    });
    let text = URL_TOKEN.replace_all(&text, |c: &Captures| {
        format!("{}{}{}", &c[1], mask(&c[2]), &c[3])
    });
    let text = AUTH_HEADER.replace_all(&text, |c: &Captures| format!("{}{}", &c[1], mask(&c[2])));
    let text = KEY_HEADER.replace_all(&text, |c: &Captures| format!("{}{}", &c[1], mask(&c[2])));
    let text = JWT.replace_all(&text, |c: &Captures| mask(&c[0]));
    let text = VENDOR.replace_all(&text, |c: &Captures| mask(&c[0]));
    let text = TELEGRAM.replace_all(&text, |c: &Captures| mask(&c[0]));
    let text = ASSIGNMENT.replace_all(&text, |c: &Captures| {
        if looks_secret(&c[4]) {
            format!("{}{}{}{}", &c[1], &c[2], &c[3], mask(&c[4]))
        } else {
            c[0].to_string()
        }
    });
    let text = ASSIGNMENT_ANY_CASE.replace_all(&text, |c: &Captures| {
        // Upper-case names were handled above (and their values are masked already).
        if c[1].chars().any(|ch| ch.is_ascii_lowercase()) && looks_secret(&c[4]) {
            format!("{}{}{}{}", &c[1], &c[2], &c[3], mask(&c[4]))
        } else {
            c[0].to_string()
        }
    });
    let text = JSON_FIELD.replace_all(&text, |c: &Captures| {
        if looks_secret(&c[2]) {
            format!("{}{}", &c[1], mask(&c[2]))
        } else {
            c[0].to_string()
        }
    });
    let text = YAML_FIELD.replace_all(&text, |c: &Captures| {
        if looks_secret(&c[3]) {
            format!("{}{}{}", &c[1], &c[2], mask(&c[3]))
        } else {
            c[0].to_string()
        }
    });
    text.into_owned()
}

/// What troupe's own secrets are replaced with, in whatever encoding they were found.
pub const OWN_SECRET_MASK: &str = "[redacted: one of troupe's secrets]";

/// Values shorter than this are not treated as troupe's own secrets (too many false matches).
const OWN_SECRET_MIN_CHARS: usize = 8;

/// Secret values troupe was handed other than through its environment (see [`remember_secret`]).
static REMEMBERED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Secret values in troupe's environment: variables whose names say secret. Read once, as
/// troupe never changes its own environment after it starts (its one `set_var` sets a thread
/// count); reading it for every tool result (a copy of every variable, each name matched
/// against the secret names) cost a sixth of a board worker's CPU.
static ENV_SECRETS: LazyLock<Vec<String>> = LazyLock::new(|| {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, value)| {
            super::sandbox_env::is_secret_name(name)
                && value.chars().count() >= OWN_SECRET_MIN_CHARS
                && !value.starts_with('/')
        })
        .map(|(_, value)| value)
        .collect()
});

/// The pattern for troupe's own secrets, with how many remembered secrets it was built with
/// (they are only ever added to).
static OWN_PATTERN: Mutex<Option<(usize, Option<Arc<Regex>>)>> = Mutex::new(None);

/// Adds a secret troupe holds (a key read from a config file, say) to those [`redact`] masks
/// in every encoding, like the secrets in troupe's environment.
pub fn remember_secret(value: &str) {
    if value.chars().count() >= OWN_SECRET_MIN_CHARS {
        let mut remembered = crate::sync::lock(&REMEMBERED);
        if !remembered.iter().any(|v| v == value) {
            remembered.push(value.to_string());
        }
    }
}

/// troupe's own secret values: environment variables whose names say secret, and `remembered`.
fn own_secret_values(remembered: &[String]) -> Vec<String> {
    let mut values: Vec<String> = ENV_SECRETS.iter().chain(remembered).cloned().collect();
    values.sort();
    values.dedup();
    values
}

/// `text` with only troupe's own secrets masked (plain, reversed or encoded), nothing else: for
/// every tool result, where the general patterns would also change ordinary file contents.
pub fn mask_own_secrets(text: &str) -> std::borrow::Cow<'_, str> {
    OwnSecrets::current().redact(text)
}

/// Masks troupe's own secrets in every text part of `result` and in every string (value or key)
/// of its structured output (see [`mask_own_secrets`]): the tool runner does this for every
/// tool, so no tool (a file read, an MCP server's answer) hands one of troupe's keys to the
/// model, a hook, a trace, the session store or an MCP client reading `structuredContent`.
pub fn mask_own_secrets_in(result: &mut crate::tool::ToolResult) {
    let own = OwnSecrets::current();
    if own.pattern.is_none() {
        return;
    }
    if let Some(structured) = result.structured.as_mut() {
        mask_own_secrets_in_json(&own, structured);
    }
    for part in &mut result.content {
        let text = match part {
            crate::tool::Content::Text(text) => text,
            crate::tool::Content::Resource {
                text: Some(text), ..
            } => text,
            _ => continue,
        };
        if let std::borrow::Cow::Owned(masked) = own.redact(text) {
            *text = masked;
        }
    }
}

/// Masks `own` in every string of `value`, object keys included (a secret may be a key).
fn mask_own_secrets_in_json(own: &OwnSecrets, value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(text) => {
            if let std::borrow::Cow::Owned(masked) = own.redact(text) {
                *text = masked;
            }
        }
        Value::Array(items) => {
            for item in items {
                mask_own_secrets_in_json(own, item);
            }
        }
        Value::Object(map) => {
            let needs_new_keys = map
                .keys()
                .any(|key| matches!(own.redact(key), std::borrow::Cow::Owned(_)));
            if needs_new_keys {
                let old = std::mem::take(map);
                for (key, item) in old {
                    let key = own.redact(&key).into_owned();
                    map.insert(key, item);
                }
            }
            for item in map.values_mut() {
                mask_own_secrets_in_json(own, item);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// troupe's own secret values, plain or encoded, as one reading of the environment found them.
/// Cloning shares the compiled pattern.
#[derive(Clone, Default)]
pub struct OwnSecrets {
    pattern: Option<Arc<Regex>>,
}

impl std::fmt::Debug for OwnSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the pattern: it spells the secrets out.
        f.debug_struct("OwnSecrets")
            .field("any", &self.pattern.is_some())
            .finish()
    }
}

impl OwnSecrets {
    /// The secrets of the environment and those remembered so far; the pattern is rebuilt only
    /// when a secret was remembered since it was built.
    pub fn current() -> OwnSecrets {
        let remembered = crate::sync::lock(&REMEMBERED);
        if remembered.is_empty() && ENV_SECRETS.is_empty() {
            return OwnSecrets::default();
        }
        let mut cached = crate::sync::lock(&OWN_PATTERN);
        if cached.as_ref().is_none_or(|(n, _)| *n != remembered.len()) {
            let values = own_secret_values(&remembered);
            *cached = Some((remembered.len(), own_secret_pattern(&values).map(Arc::new)));
        }
        OwnSecrets {
            pattern: cached.as_ref().and_then(|(_, re)| re.clone()),
        }
    }

    /// Masks these secrets in `text`, plain, reversed or encoded.
    pub fn redact<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        match &self.pattern {
            Some(re) => re.replace_all(text, OWN_SECRET_MASK),
            None => text.into(),
        }
    }
}

/// One pattern matching every secret plain, URL-encoded, in hex and in base64 (standard and
/// URL-safe alphabets, at each of the three positions a value can take in an encoded stream),
/// tolerating the line breaks `base64` and `xxd -p` put into long output.
fn own_secret_pattern(values: &[String]) -> Option<Regex> {
    let mut alternatives: Vec<String> = vec![];
    for value in values {
        // Plain and reversed (`rev`), in any case (`tr a-z A-Z`).
        alternatives.push(format!("(?i:{})", regex::escape(value)));
        let reversed: String = value.chars().rev().collect();
        alternatives.push(format!("(?i:{})", regex::escape(&reversed)));
        let url = url_encode(value);
        if url != *value {
            alternatives.push(regex::escape(&url));
            alternatives.push(regex::escape(&url.replace("%20", "+")));
        }
        let bytes = value.as_bytes();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut encoded = vec![hex.clone(), hex.to_uppercase()];
        for offset in 0..3 {
            if let Some(core) = base64_core(bytes, offset) {
                encoded.push(core.replace('+', "-").replace('/', "_"));
                encoded.push(core);
            }
        }
        for e in encoded {
            let wrapped: Vec<String> = e.chars().map(|c| regex::escape(&c.to_string())).collect();
            alternatives.push(wrapped.join(r"(?:\r?\n)?"));
        }
    }
    alternatives.sort_by_key(|a| std::cmp::Reverse(a.len()));
    alternatives.dedup();
    match regex::RegexBuilder::new(&alternatives.join("|"))
        .size_limit(64 << 20)
        .build()
    {
        Ok(re) => Some(re),
        Err(err) => {
            tracing::error!(%err, "could not build the pattern for troupe's own secrets");
            None
        }
    }
}

/// Percent-encoding of everything but unreserved characters.
fn url_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The base64 characters that depend only on `bytes` when they start `offset` bytes (0 to 2)
/// into a longer encoded stream; None when too few remain to match safely.
fn base64_core(bytes: &[u8], offset: usize) -> Option<String> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut padded = vec![0u8; offset];
    padded.extend_from_slice(bytes);
    let bits = padded.len() * 8;
    let mut chars = String::new();
    // Character k covers bits [6k, 6k + 6); keep those inside the value's own bits.
    let first = (offset * 8).div_ceil(6);
    let end = bits / 6;
    for k in first..end {
        let bit = 6 * k;
        let (byte, shift) = (bit / 8, bit % 8);
        let hi = u16::from(padded[byte]) << 8;
        let lo = u16::from(padded.get(byte + 1).copied().unwrap_or(0));
        let index = ((hi | lo) >> (10 - shift)) & 0x3f;
        chars.push(ALPHABET[index as usize] as char);
    }
    (chars.len() >= 10).then_some(chars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_tokens_are_masked() {
        let openai = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";
        let out = redact(&format!("key is {openai} ok"));
        assert!(!out.contains(openai), "{out}");
        assert!(out.contains("sk-pro...6789"), "{out}");
        let gh = "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        assert!(!redact(gh).contains(gh));
        assert!(!redact("AKIAABCDEFGHIJKLMNOP").contains("AKIAABCDEFGHIJKLMNOP"));
    }

    #[test]
    fn assignments_headers_urls_and_keys() {
        let out = redact("OPENAI_API_KEY=abc123secretvalue MAX_TOKENS=100 PATH=/usr/bin");
        assert!(!out.contains("abc123secretvalue"), "{out}");
        assert!(
            out.contains("MAX_TOKENS=100") && out.contains("PATH=/usr/bin"),
            "{out}"
        );
        let out = redact("Authorization: Bearer abcdefghijklmnopqrstuvwxyz");
        assert!(
            out.starts_with("Authorization: Bearer ") && !out.contains("lmnopq"),
            "{out}"
        );
        let out = redact("postgres://app:hunter2hunter2@db:5432/x");
        assert!(
            !out.contains("hunter2hunter2") && out.contains("@db:5432"),
            "{out}"
        );
        let pem =
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----";
        assert!(!redact(pem).contains("MIIEpAIBAAKCAQEA"));
        let out = redact(r#"{"api_key": "zzzzyyyyxxxx"}"#);
        assert!(!out.contains("zzzzyyyyxxxx"), "{out}");
        let out = redact("password: s3cretpass\nname: x");
        assert!(
            !out.contains("s3cretpass") && out.contains("name: x"),
            "{out}"
        );
    }

    #[test]
    fn ordinary_text_is_untouched() {
        let text =
            "compiled 12 crates in 3.2s; see /tmp/out.log\nthe password= field is documented";
        assert_eq!(redact(text), text);
    }

    #[test]
    fn lower_case_assignments_are_masked() {
        let out = redact("login ok; password=hunter2hunter2 user=bob");
        assert!(
            !out.contains("hunter2hunter2") && out.contains("user=bob"),
            "{out}"
        );
        let out = redact("db_secret:abcd1234efgh");
        assert!(!out.contains("abcd1234efgh"), "{out}");
        assert_eq!(redact("sorted(x, key=len)"), "sorted(x, key=len)");
    }

    #[test]
    fn base64_core_matches_a_real_encoder_at_every_offset() {
        // Reference encodings made with `printf ... | base64`.
        assert_eq!(
            base64_core(b"sk-secret-value", 0).as_deref(),
            Some("c2stc2VjcmV0LXZhbHVl")
        );
        let stream = "eHNrLXNlY3JldC12YWx1ZQ=="; // "xsk-secret-value"
        let core = base64_core(b"sk-secret-value", 1).unwrap_or_default();
        assert!(stream.contains(&core), "{core}");
        let stream = "eHlzay1zZWNyZXQtdmFsdWU="; // "xysk-secret-value"
        let core = base64_core(b"sk-secret-value", 2).unwrap_or_default();
        assert!(stream.contains(&core), "{core}");
    }

    #[test]
    fn one_reading_of_own_secrets_masks_like_redact() {
        let secret = "own-secret-for-the-reading-test-4242";
        remember_secret(secret);
        let own = OwnSecrets::current();
        let text = format!("x {secret} y {}", url_encode(secret));
        assert_eq!(redact_with(&text, &own), redact(&text));
        assert_eq!(
            redact_with(&text, &own),
            format!("x {OWN_SECRET_MASK} y {OWN_SECRET_MASK}")
        );
        assert!(!format!("{own:?}").contains(secret));
    }

    #[test]
    fn own_secrets_are_masked_in_structured_output_too() {
        let secret = "own-secret-for-the-structured-test-5151";
        remember_secret(secret);
        let value = serde_json::json!({
            "content": format!("line {secret} end"),
            "nested": [{"deep": secret}, 7, null],
            secret: "a key that is a secret",
        });
        let mut result = crate::tool::ToolResult::json(value);
        mask_own_secrets_in(&mut result);
        let structured = result.structured.clone().unwrap().to_string();
        assert!(!structured.contains(secret), "{structured}");
        assert!(structured.contains(OWN_SECRET_MASK), "{structured}");
        assert!(
            structured.contains("a key that is a secret"),
            "{structured}"
        );
        assert!(structured.contains('7'), "{structured}");
        assert!(!result.to_model_text().contains(secret));
    }

    #[test]
    fn mask_lengths() {
        assert_eq!(mask("short"), "***");
        assert_eq!(mask("abcdefghijklmnopqrstuvwxyz"), "abcdef...wxyz");
    }

    #[test]
    fn own_secrets_are_masked_reversed_and_in_any_case() {
        let secret = "Own-Secret-For-The-Reverse-Test-77";
        remember_secret(secret);
        let reversed: String = secret.chars().rev().collect();
        for shown in [
            secret.to_string(),
            reversed.clone(),
            secret.to_uppercase(),
            reversed.to_lowercase(),
        ] {
            let out = redact(&format!("before {shown} after"));
            assert_eq!(out, format!("before {OWN_SECRET_MASK} after"), "{shown}");
            let text = format!("[{shown}]");
            assert_eq!(
                mask_own_secrets(&text),
                format!("[{OWN_SECRET_MASK}]"),
                "{shown}"
            );
        }
        // Nothing else is touched by the own-secrets pass.
        let text = "password=hunter2hunter2 and sk-proj-abcdefghijklmnopqrstuvwxyz";
        assert_eq!(mask_own_secrets(text), text);
    }
}
