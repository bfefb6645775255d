//! A profile's `review:` key: whether its workers' completions wait for review, and who
//! reviews them. Written as `person`, `agent` (the profile named `reviewer` reviews), or a
//! mapping `{by: person}` / `{by: agent, profile: NAME, max_rounds: N}`. The reviewer profile
//! must be one of `profiles:`; `check_reviewers` says so once every profile is read.

use std::collections::BTreeMap;

use serde_json::Value;
use troupe_kanban::review::DEFAULT_MAX_ROUNDS;
use troupe_tools::text::yaml_kind;

use super::kanban::{ProfileSettings, known};
use super::keys::{ConfigError, invalid, string, whole};

/// The keys of a `review:` mapping.
pub(crate) const REVIEW_KEYS: &[&str] = &["by", "profile", "max_rounds"];

/// The reviewer profile `review: agent` names when it names none.
pub const DEFAULT_REVIEWER: &str = "reviewer";

/// Who reviews a profile's completions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewSetting {
    /// A person: the task waits in `review`.
    Person,
    /// A reviewer profile, then a person once it sent the task back `max_rounds` times.
    Agent {
        /// The reviewer profile's name.
        profile: String,
        /// Reviews of one task by the reviewer before a person must decide.
        max_rounds: u32,
    },
}

const SHAPES: &str = "person, agent, {by: person} or {by: agent, profile: reviewer, max_rounds: 2}";

/// Reads `profiles.<name>.review` (`prefix` is `profiles.<name>`).
pub(crate) fn read(
    value: Option<&Value>,
    prefix: &str,
) -> Result<Option<ReviewSetting>, ConfigError> {
    let key = format!("{prefix}.review");
    let agent = |profile: Option<String>, max_rounds: Option<u64>| ReviewSetting::Agent {
        profile: profile.unwrap_or_else(|| DEFAULT_REVIEWER.to_string()),
        max_rounds: max_rounds.map_or(DEFAULT_MAX_ROUNDS, |n| n.min(u64::from(u32::MAX)) as u32),
    };
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(word)) => match word.trim() {
            "person" => Ok(Some(ReviewSetting::Person)),
            "agent" => Ok(Some(agent(None, None))),
            "none" | "" => Ok(None),
            other => Err(invalid(
                &key,
                format!("{other:?} is not a reviewer; write {SHAPES}, or leave review out"),
            )),
        },
        Some(Value::Object(map)) => {
            if let Some(unknown) = map.keys().find(|k| !REVIEW_KEYS.contains(&k.as_str())) {
                return Err(invalid(
                    &format!("{key}.{unknown}"),
                    format!(
                        "a review: mapping holds only {}; write {SHAPES}",
                        REVIEW_KEYS.join(", ")
                    ),
                ));
            }
            let profile = string(map, &key, "profile")?;
            let max_rounds = whole(map, &key, "max_rounds")?;
            match string(map, &key, "by")?.as_deref() {
                Some("person") => {
                    if profile.is_some() || max_rounds.is_some() {
                        return Err(invalid(
                            &key,
                            "profile and max_rounds are for by: agent; a person's review takes neither"
                                .into(),
                        ));
                    }
                    Ok(Some(ReviewSetting::Person))
                }
                Some("agent") => Ok(Some(agent(profile, max_rounds))),
                Some(other) => Err(invalid(
                    &format!("{key}.by"),
                    format!("{other:?} is not a reviewer; write person or agent"),
                )),
                None => Err(invalid(
                    &format!("{key}.by"),
                    "is missing; write by: person or by: agent".into(),
                )),
            }
        }
        Some(other) => Err(invalid(
            &key,
            format!("expected {SHAPES}, found {}", yaml_kind(other)),
        )),
    }
}

/// Every reviewer profile a `review:` names is one of `profiles`.
pub(crate) fn check_reviewers(
    profiles: &BTreeMap<String, ProfileSettings>,
) -> Result<(), ConfigError> {
    for (name, p) in profiles {
        if let Some(ReviewSetting::Agent { profile, .. }) = &p.review
            && !profiles.contains_key(profile)
        {
            return Err(invalid(
                &format!("profiles.{name}.review"),
                format!(
                    "names the reviewer profile {profile:?}, which is not under profiles: (known: {}); add it, or name one with review: {{by: agent, profile: NAME}}",
                    known(profiles)
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profiles(yaml: &str) -> Result<BTreeMap<String, ProfileSettings>, ConfigError> {
        crate::settings::Settings::parse(yaml).map(|s| s.kanban.profiles)
    }

    #[test]
    fn every_shape_reads() {
        let p = profiles(
            "profiles:\n  a: {review: person}\n  b: {review: agent}\n  reviewer: {}\n  c: {review: {by: agent, profile: a, max_rounds: 3}}\n  d: {review: {by: person}}\n  e: {}\n",
        )
        .unwrap();
        assert_eq!(p["a"].review, Some(ReviewSetting::Person));
        assert_eq!(
            p["b"].review,
            Some(ReviewSetting::Agent {
                profile: "reviewer".into(),
                max_rounds: DEFAULT_MAX_ROUNDS
            })
        );
        assert_eq!(
            p["c"].review,
            Some(ReviewSetting::Agent {
                profile: "a".into(),
                max_rounds: 3
            })
        );
        assert_eq!(p["d"].review, Some(ReviewSetting::Person));
        assert_eq!(p["e"].review, None);
    }

    #[test]
    fn wrong_values_are_errors_naming_the_key() {
        for (yaml, key, words) in [
            (
                "profiles: {a: {review: people}}",
                "profiles.a.review",
                "person, agent",
            ),
            (
                "profiles: {a: {review: agent}}",
                "profiles.a.review",
                "\"reviewer\"",
            ),
            (
                "profiles: {a: {review: {by: agent, profile: ghost}}}",
                "profiles.a.review",
                "ghost",
            ),
            (
                "profiles: {a: {review: {by: robot}}}",
                "profiles.a.review.by",
                "person or agent",
            ),
            (
                "profiles: {a: {review: {profile: a}}}",
                "profiles.a.review.by",
                "missing",
            ),
            (
                "profiles: {a: {review: {by: agent, rounds: 2}}}",
                "profiles.a.review.rounds",
                "by, profile, max_rounds",
            ),
            (
                "profiles: {a: {review: {by: agent, profile: a, max_rounds: 0}}}",
                "profiles.a.review.max_rounds",
                "at least 1",
            ),
            (
                "profiles: {a: {review: [person]}}",
                "profiles.a.review",
                "found",
            ),
        ] {
            let err = profiles(yaml).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(words), "{yaml}: {err}");
        }
    }
}
