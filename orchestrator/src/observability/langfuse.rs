//! The bundled `observability/langfuse` plugin: troupe's spans, sent to Langfuse's OTLP endpoint
//! (`<base>/api/public/otel`) with its keys as basic auth. Off until enabled in `plugins.enabled`;
//! enabled without keys, it is reported once at start and sends nothing.
//!
//! Settings come from the environment, each under troupe's name first and Langfuse's standard
//! one second: `TROUPE_LANGFUSE_PUBLIC_KEY` / `LANGFUSE_PUBLIC_KEY`, `..._SECRET_KEY`,
//! `..._BASE_URL` (also `LANGFUSE_HOST`; Langfuse Cloud by default), `..._ENVIRONMENT`,
//! `..._RELEASE`, `..._SAMPLE_RATE`, `..._MAX_CHARS` (the longest argument or result on a
//! span). Langfuse groups traces into sessions by the spans' `session.id`, which troupe sets to
//! the root session's id.

use super::ExportTarget;

/// The plugin's name, as `plugins.enabled` lists it.
pub const NAME: &str = "observability/langfuse";

/// Where traces go when no base URL is set.
pub const DEFAULT_BASE_URL: &str = "https://cloud.langfuse.com";

/// The first non-empty of the variables `names`.
fn var(names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|name| std::env::var(name).ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The destination the environment describes, or what is missing.
pub fn target() -> Result<ExportTarget, String> {
    let public = var(&["TROUPE_LANGFUSE_PUBLIC_KEY", "LANGFUSE_PUBLIC_KEY"]);
    let secret = var(&["TROUPE_LANGFUSE_SECRET_KEY", "LANGFUSE_SECRET_KEY"]);
    let (Some(public), Some(secret)) = (public, secret) else {
        return Err(
            "needs TROUPE_LANGFUSE_PUBLIC_KEY and TROUPE_LANGFUSE_SECRET_KEY (or LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY) set to the project's keys".into(),
        );
    };
    let base = var(&[
        "TROUPE_LANGFUSE_BASE_URL",
        "LANGFUSE_BASE_URL",
        "LANGFUSE_HOST",
    ])
    .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(format!(
            "TROUPE_LANGFUSE_BASE_URL is {base:?}; set it to the Langfuse server's http(s) URL, such as {DEFAULT_BASE_URL}"
        ));
    }
    let sample_rate = match var(&["TROUPE_LANGFUSE_SAMPLE_RATE", "LANGFUSE_SAMPLE_RATE"]) {
        None => None,
        Some(raw) => Some(
            raw.parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| {
                    format!(
                        "TROUPE_LANGFUSE_SAMPLE_RATE is {raw:?}; set a share from 0 to 1, such as 0.25"
                    )
                })?,
        ),
    };
    let max_chars = match var(&["TROUPE_LANGFUSE_MAX_CHARS", "LANGFUSE_MAX_CHARS"]) {
        None => None,
        Some(raw) => Some(raw.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
            format!("TROUPE_LANGFUSE_MAX_CHARS is {raw:?}; set a number of characters, such as 12000")
        })?),
    };
    let mut resource = Vec::new();
    if let Some(environment) = var(&[
        "TROUPE_LANGFUSE_ENVIRONMENT",
        "LANGFUSE_TRACING_ENVIRONMENT",
    ]) {
        resource.push(("deployment.environment.name".to_string(), environment));
    }
    if let Some(release) = var(&["TROUPE_LANGFUSE_RELEASE", "LANGFUSE_RELEASE"]) {
        resource.push(("service.version".to_string(), release));
    }
    Ok(ExportTarget {
        url: format!("{}/api/public/otel/v1/traces", base.trim_end_matches('/')),
        headers: vec![(
            "Authorization".to_string(),
            format!("Basic {}", base64(format!("{public}:{secret}").as_bytes())),
        )],
        resource,
        sample_rate,
        max_chars,
    })
}

/// Standard base64 with padding (RFC 4648), for the basic-auth header.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
    }
}
