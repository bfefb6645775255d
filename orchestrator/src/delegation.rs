//! `delegate_task` in the orchestrator: turns delegation on (with the `delegation:` section of
//! troupe.yaml, read in [`crate::settings`]) for the sessions a troupe opens
//! ([`enable_delegation`]: registers the tool with the live limits in its text and hands the
//! limits to the session settings). Called by [`crate::Runtime::start`], so every entry point
//! gets it; the work itself happens in `troupe_actors::delegate`.

use troupe_actors::delegate::{DelegationConfig, register_delegate_task};
use troupe_actors::session::SessionConfig;
use troupe_tools::Registry;

/// Makes `delegate_task` available: registers it in `registry` (toolset `delegation`) and
/// puts `delegation` in `session`. `background` lets top-level sessions get results as a later
/// message; pass false for one-shot runs (`troupe chat -q`), which wait for the results.
pub fn enable_delegation(
    registry: &Registry,
    session: &mut SessionConfig,
    delegation: DelegationConfig,
    background: bool,
) {
    register_delegate_task(registry, &delegation);
    session.delegation = delegation;
    session.background_delegation = background;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{ConfigError, Settings};

    #[test]
    fn the_section_is_read_and_bad_keys_are_named() {
        let config =
            Settings::parse("delegation:\n  max_concurrent_children: 4\n  max_spawn_depth: 2\n")
                .unwrap();
        let delegation = config.delegation;
        assert_eq!(delegation.max_concurrent_children, 4);
        assert_eq!(delegation.max_spawn_depth, 2);

        match Settings::parse("delegation:\n  max_spawn_depth: 0\n").unwrap_err() {
            ConfigError::Invalid { key, problem } => {
                assert_eq!(key, "delegation.max_spawn_depth");
                assert!(problem.contains("1 or more"), "{problem}");
            }
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn enabling_registers_the_tool_and_sets_the_limits() {
        let registry = Registry::new();
        let mut session = SessionConfig::default();
        let delegation = DelegationConfig {
            max_concurrent_children: 3,
            ..DelegationConfig::default()
        };
        enable_delegation(&registry, &mut session, delegation, false);
        let def = registry.get("delegate_task").unwrap();
        assert!(def.description().contains("at most 3 tasks"));
        assert_eq!(def.toolset.as_deref(), Some("delegation"));
        assert_eq!(session.delegation.max_concurrent_children, 3);
        assert!(!session.background_delegation);
    }
}
