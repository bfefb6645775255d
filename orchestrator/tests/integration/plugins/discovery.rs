//! Finding plugins in the three places, clashes, broken manifests, and `troupe plugins
//! enable|disable` editing troupe.yaml without touching anything else.

use serde_json::Value;

use crate::support::plugin_world::{World, assert_success};

fn by_name<'a>(listing: &'a Value, name: &str) -> Option<&'a Value> {
    listing["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
}

const SIMPLE: &str = "version: 1.0.0\ndescription: a test plugin\n";

#[test]
fn three_sources_later_wins_and_the_project_needs_the_switch() {
    let mut w = World::new();
    w.plugin(&w.bundled(), "alpha", SIMPLE, &[]);
    w.plugin(&w.user_plugins(), "alpha", SIMPLE, &[]);
    w.plugin(&w.user_plugins(), "beta", SIMPLE, &[]);
    w.plugin(&w.project_plugins(), "beta", SIMPLE, &[]);
    w.plugin(&w.project_plugins(), "gamma", SIMPLE, &[]);
    // A folder without a manifest is not a plugin.
    std::fs::create_dir_all(w.user_plugins().join("not-a-plugin")).unwrap();

    let listing = w.listing();
    let alpha = by_name(&listing, "alpha").unwrap();
    assert_eq!(alpha["source"], "user");
    assert_eq!(alpha["hides"][0]["source"], "bundled");
    assert_eq!(by_name(&listing, "beta").unwrap()["source"], "user");
    assert!(
        by_name(&listing, "gamma").is_none(),
        "project plugins need the switch"
    );
    assert!(by_name(&listing, "not-a-plugin").is_none());
    assert!(listing["project_plugins_skipped"].is_string());
    // The compiled-in plugin is found, and off until enabled.
    let cleanup = by_name(&listing, "disk-cleanup").unwrap();
    assert_eq!(cleanup["source"], "bundled");
    assert_eq!(cleanup["enabled"], false);

    let table = w.ok(&["plugins", "list"]);
    assert!(table.contains("TROUPE_ENABLE_PROJECT_PLUGINS=1"), "{table}");
    assert!(
        table.contains("user plugin 'alpha'") && table.contains("hides the bundled one"),
        "{table}"
    );

    w.project_switch = true;
    let listing = w.listing();
    let beta = by_name(&listing, "beta").unwrap();
    assert_eq!(beta["source"], "project");
    assert_eq!(beta["hides"][0]["source"], "user");
    assert_eq!(by_name(&listing, "gamma").unwrap()["source"], "project");
    assert!(listing["project_plugins_skipped"].is_null());
}

#[test]
fn a_user_folder_replaces_the_compiled_in_plugin() {
    let w = World::new();
    w.plugin(
        &w.user_plugins(),
        "disk-cleanup",
        "version: 9.0.0\ncommands:\n  disk-cleanup: {command: echo mine}\n",
        &[],
    );
    w.config("plugins:\n  enabled: [disk-cleanup]\n");
    let listing = w.listing();
    let cleanup = by_name(&listing, "disk-cleanup").unwrap();
    assert_eq!(cleanup["source"], "user");
    assert_eq!(cleanup["version"], "9.0.0");
    assert_eq!(cleanup["hides"][0]["source"], "bundled");
    assert!(cleanup["hides"][0]["dir"].is_null());
    // The user's command answers, not the compiled-in one.
    let out = w.run(&["chat", "-q", "/disk-cleanup status"]);
    assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "mine");
}

#[test]
fn a_broken_manifest_disables_that_plugin_alone() {
    let w = World::new();
    w.plugin(
        &w.user_plugins(),
        "broken",
        "hooks:\n  pre_tool_call: {command: ./deny.sh, timeout: forever}\n",
        &[],
    );
    w.plugin(&w.user_plugins(), "garbled", "name: [unclosed\n", &[]);
    w.plugin(
        &w.user_plugins(),
        "good",
        "commands:\n  hello: {command: 'echo hello from good', description: Says hello}\n",
        &[],
    );
    w.config("plugins:\n  enabled: [broken, garbled, good, nowhere]\n");
    let listing = w.listing();
    let broken = by_name(&listing, "broken").unwrap();
    assert_eq!(broken["loaded"], false);
    let problem = broken["problems"][0].as_str().unwrap();
    assert!(
        problem.contains("broken/plugin.yaml") && problem.contains("hooks.pre_tool_call.timeout"),
        "{problem}"
    );
    let garbled = by_name(&listing, "garbled").unwrap();
    assert!(
        garbled["problems"][0]
            .as_str()
            .unwrap()
            .contains("garbled/plugin.yaml: field `(file)`")
    );
    assert_eq!(by_name(&listing, "good").unwrap()["loaded"], true);
    assert_eq!(listing["unknown_enabled"][0], "nowhere");

    // troupe still starts: the good plugin's command answers, the broken ones are reported.
    let out = w.run(&["chat", "-q", "/hello"]);
    assert_success(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "hello from good"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("plugin 'broken' is enabled but not loaded")
            && stderr.contains("hooks.pre_tool_call.timeout"),
        "{stderr}"
    );
    assert!(stderr.contains("'nowhere'"), "{stderr}");

    let info = w.ok(&["plugins", "info", "broken"]);
    assert!(
        info.contains("problem:") && info.contains("timeout"),
        "{info}"
    );
}

#[test]
fn enable_and_disable_keep_the_rest_of_the_file_byte_for_byte() {
    let w = World::new();
    let original = "# troupe.yaml for the team\nmodel:\n  base_url: http://127.0.0.1:9/v1   # local\n  model: \"qwen\"\n\nplugins:\n  # chosen by hand\n  enabled:\n    - 'alpha'\n  disabled: [zeta]\n\napprovals: {mode: manual}\n";
    w.plugin(&w.user_plugins(), "alpha", SIMPLE, &[]);
    w.config(original);
    let path = w.project().join("troupe.yaml");

    let out = w.ok(&["plugins", "enable", "disk-cleanup"]);
    assert!(out.contains("Enabled 'disk-cleanup'"), "{out}");
    let enabled = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        enabled,
        original.replace("    - 'alpha'\n", "    - 'alpha'\n    - disk-cleanup\n")
    );
    let listing = w.listing();
    assert_eq!(by_name(&listing, "disk-cleanup").unwrap()["enabled"], true);
    assert!(
        w.ok(&["plugins", "info", "disk-cleanup"])
            .contains("enabled:     yes")
    );

    // Enabling twice changes nothing.
    assert!(
        w.ok(&["plugins", "enable", "disk-cleanup"])
            .contains("already")
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), enabled);

    w.ok(&["plugins", "disable", "disk-cleanup"]);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), original);
    w.ok(&["plugins", "disable", "alpha"]);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        original.replace("    - 'alpha'\n", "")
    );

    // An unknown plugin is refused and the file stays as it is.
    let before = std::fs::read_to_string(&path).unwrap();
    let out = w.run(&["plugins", "enable", "no-such-plugin"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no plugin named 'no-such-plugin'"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
}

#[test]
fn enable_adds_the_section_to_a_file_without_one() {
    let w = World::new();
    let original = "approvals:\n  mode: manual\n";
    w.config(original);
    w.ok(&["plugins", "enable", "disk-cleanup"]);
    let path = w.project().join("troupe.yaml");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        format!("{original}plugins:\n  enabled:\n    - disk-cleanup\n")
    );
    w.ok(&["plugins", "disable", "disk-cleanup"]);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        format!("{original}plugins:\n  enabled:\n")
    );
    assert_eq!(
        by_name(&w.listing(), "disk-cleanup").unwrap()["enabled"],
        false
    );
}
