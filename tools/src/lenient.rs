//! Lenient number reading for values a model or a config file wrote: the same results as
//! Python's `int()` and `float()`, which the reference applies to `limit` and the tool-search
//! settings (`"3"` is 3, `2.9` is 2, `true` is 1, `" 1_0 "` is 10, `"3.5"` is not an integer).

use serde_json::Value;

/// `int(value)` as Python computes it, or `None` where Python raises.
pub fn py_int(value: &Value) -> Option<i64> {
    match value {
        Value::Bool(b) => Some(i64::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(i)
            } else if let Some(u) = n.as_u64() {
                Some(i64::try_from(u).unwrap_or(i64::MAX))
            } else {
                let f = n.as_f64()?;
                // int() of inf or nan raises; anything else truncates toward zero.
                f.is_finite().then(|| saturating_trunc(f))
            }
        }
        Value::String(s) => parse_py_int_str(s),
        _ => None,
    }
}

/// `float(value)` as Python computes it, or `None` where Python raises.
pub fn py_float(value: &Value) -> Option<f64> {
    match value {
        Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        Value::Number(n) => n.as_f64(),
        Value::String(s) => parse_py_float_str(s),
        _ => None,
    }
}

/// `str(value)` as Python prints a JSON scalar (`True`, `None`, `3`, `2.5`).
pub fn py_str(value: &Value) -> String {
    match value {
        Value::Null => "None".to_string(),
        Value::Bool(true) => "True".to_string(),
        Value::Bool(false) => "False".to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) => py_float_repr(f),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// Python's truthiness of a JSON value: `null`, `false`, `0`, `0.0`, `""`, `[]` and `{}` are
/// falsy.
pub fn py_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn py_float_repr(f: f64) -> String {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e16 {
        format!("{f:.1}")
    } else if f.is_nan() {
        "nan".to_string()
    } else if f.is_infinite() {
        if f > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{f}")
    }
}

fn saturating_trunc(f: f64) -> i64 {
    // `as` saturates at the i64 bounds, which is what every caller wants before clamping.
    f.trunc() as i64
}

/// Python's whitespace for `int()`/`float()` stripping (ASCII and Unicode spaces).
fn strip_py(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace())
}

/// Digits with single underscores between them, as Python's base-10 literal rules allow.
fn digits_with_underscores(s: &str) -> Option<String> {
    if s.is_empty() || s.starts_with('_') || s.ends_with('_') || s.contains("__") {
        return None;
    }
    let digits: String = s.chars().filter(|&c| c != '_').collect();
    (!digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())).then_some(digits)
}

fn parse_py_int_str(s: &str) -> Option<i64> {
    let s = strip_py(s);
    let (negative, body) = match s.as_bytes().first()? {
        b'+' => (false, &s[1..]),
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    let digits = digits_with_underscores(body)?;
    let magnitude: i64 = digits.parse().unwrap_or(i64::MAX);
    Some(if negative { -magnitude } else { magnitude })
}

fn parse_py_float_str(s: &str) -> Option<f64> {
    let s = strip_py(s);
    if s.is_empty() {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    if lower.len() - unsigned.len() > 1 {
        return None;
    }
    let negative = lower.starts_with('-');
    let special = match unsigned {
        "inf" | "infinity" => Some(f64::INFINITY),
        "nan" => Some(f64::NAN),
        _ => None,
    };
    if let Some(v) = special {
        return Some(if negative { -v } else { v });
    }
    // Underscores may only sit between digits; then the rest is an ordinary decimal literal.
    let bytes = unsigned.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'_' {
            let before = i.checked_sub(1).map(|j| bytes[j]);
            let after = bytes.get(i + 1).copied();
            if !before.is_some_and(|c| c.is_ascii_digit())
                || !after.is_some_and(|c| c.is_ascii_digit())
            {
                return None;
            }
        }
    }
    let cleaned: String = lower.chars().filter(|&c| c != '_').collect();
    let literal = cleaned.trim_start_matches(['+', '-']);
    let valid = literal
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '+' | '-'))
        && literal.chars().any(|c| c.is_ascii_digit());
    if !valid {
        return None;
    }
    cleaned.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn int_follows_python() {
        let cases = [
            (json!(0), Some(0)),
            (json!(-7), Some(-7)),
            (json!(2.9), Some(2)),
            (json!(-2.9), Some(-2)),
            (json!(true), Some(1)),
            (json!(false), Some(0)),
            (json!("3"), Some(3)),
            (json!(" 7 "), Some(7)),
            (json!("+4"), Some(4)),
            (json!("-4"), Some(-4)),
            (json!("1_0"), Some(10)),
            (json!("1__0"), None),
            (json!("_1"), None),
            (json!("3.5"), None),
            (json!("abc"), None),
            (json!(""), None),
            (json!(null), None),
            (json!([1]), None),
            (json!({"a": 1}), None),
            (json!(1e3), Some(1000)),
        ];
        for (value, want) in cases {
            assert_eq!(py_int(&value), want, "int({value})");
        }
    }

    #[test]
    fn float_follows_python() {
        assert_eq!(py_float(&json!("7.5")), Some(7.5));
        assert_eq!(py_float(&json!(" 1e2 ")), Some(100.0));
        assert_eq!(py_float(&json!("1_000.5")), Some(1000.5));
        assert_eq!(py_float(&json!("abc")), None);
        assert_eq!(py_float(&json!("--1")), None);
        assert_eq!(py_float(&json!(true)), Some(1.0));
        assert_eq!(py_float(&json!(null)), None);
        assert!(py_float(&json!("-inf")).is_some_and(|f| f.is_infinite() && f < 0.0));
    }

    #[test]
    fn str_and_truthiness_follow_python() {
        assert_eq!(py_str(&json!(true)), "True");
        assert_eq!(py_str(&json!(null)), "None");
        assert_eq!(py_str(&json!(1.0)), "1.0");
        assert_eq!(py_str(&json!(3)), "3");
        assert!(!py_truthy(&json!(0)));
        assert!(!py_truthy(&json!("")));
        assert!(py_truthy(&json!("0")));
    }
}
