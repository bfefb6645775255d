//! Masks secrets in text before it is kept or shown: vendor API keys and tokens by their
//! prefixes, `NAME=value` assignments whose name says secret, authorization headers, private-key
//! blocks, passwords in database URLs and JWTs. Receipts always go through [`redact`]; so does
//! what `process` shows from a background process's output.

use std::sync::LazyLock;

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
    let text = PRIVATE_KEY.replace_all(
        text,
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
    fn mask_lengths() {
        assert_eq!(mask("short"), "***");
        assert_eq!(mask("abcdefghijklmnopqrstuvwxyz"), "abcdef...wxyz");
    }
}
