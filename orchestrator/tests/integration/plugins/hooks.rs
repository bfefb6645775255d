//! Hook commands around real calls of `troupe chat` (mock model over HTTP): a bash guard from
//! troupe.yaml's `hooks:` that denies, rewrites (once into arguments the schema refuses),
//! notes, hangs, crashes and answers garbage; python observers from a plugin, one of which
//! crashes; and a python hook that treats a subagent's calls differently by its agent path.

use crate::support::plugin_world::{World, assert_success, hook_log, statuses, tool_results};

const GUARD: &str = r#"#!/usr/bin/env bash
# Decides from the raw JSON on stdin; the file names steer each case.
input=$(cat)
case "$input" in
  *secret.txt*) echo '{"decision": "deny", "reason": "secret files stay closed"}' ;;
  *rewrite-me*) echo '{"decision": "rewrite", "arguments": {"path": "notes.txt"}, "note": "path rewritten by guard"}' ;;
  *bad-rewrite*) echo '{"decision": "rewrite", "arguments": {"offset": 1}}' ;;
  *note-me*) echo '{"decision": "allow", "note": "checked by guard"}' ;;
  *slow.txt*) sleep 30 ;;
  *crash.txt*) echo "guard fell over" >&2; exit 3 ;;
  *garbage.txt*) echo "this is not json" ;;
esac
exit 0
"#;

const RECORD: &str = r#"#!/usr/bin/env python3
import json, sys
payload = json.load(sys.stdin)
with open("seen.jsonl", "a") as f:
    f.write(json.dumps(payload) + "\n")
"#;

const CRASH: &str = r#"#!/usr/bin/env python3
import sys
sys.stdin.read()
raise SystemExit("observer bug")
"#;

#[tokio::test(flavor = "multi_thread")]
async fn pre_hooks_deny_rewrite_note_and_fail_closed() {
    let w = World::new();
    std::fs::write(w.project().join("notes.txt"), "hello from notes\n").unwrap();
    std::fs::write(w.project().join("note-me.txt"), "noted content\n").unwrap();
    crate::support::plugin_world::write_script(&w.project().join("hooks/guard.sh"), GUARD);
    let recorder = w.plugin(
        &w.user_plugins(),
        "recorder",
        "hooks:\n  post_tool_call: [python3 record.py, ./crash.py]\n",
        &[("record.py", RECORD), ("crash.py", CRASH)],
    );
    w.config(
        "hooks:\n  pre_tool_call: {command: ./hooks/guard.sh, timeout: 1s, tools: [read_file]}\nplugins:\n  enabled: [recorder]\n",
    );
    let cases = [
        ("c_secret", "secret.txt"),
        ("c_rewrite", "rewrite-me.txt"),
        ("c_bad", "bad-rewrite.txt"),
        ("c_note", "note-me.txt"),
        ("c_slow", "slow.txt"),
        ("c_crash", "crash.txt"),
        ("c_garbage", "garbage.txt"),
        ("c_plain", "notes.txt"),
    ];
    let mut script = String::from("turns:\n  - tool_calls:\n");
    for (id, path) in cases {
        script.push_str(&format!(
            "      - {{id: {id}, name: read_file, arguments: {{path: {path}}}}}\n"
        ));
    }
    script.push_str("  - text: done\n");
    let (out, requests) = w.chat("read the files", &script).await;
    assert_success(&out);
    let status = statuses(&out);
    let said = tool_results(&requests);
    let check = |id: &str, want: &str, needle: &str| {
        assert_eq!(status[id], want, "{id}: {}", said[id]);
        assert!(said[id].contains(needle), "{id}: {}", said[id]);
    };
    check("c_secret", "denied", "secret files stay closed");
    check("c_rewrite", "ok", "hello from notes");
    check("c_rewrite", "ok", "path rewritten by guard");
    check("c_bad", "denied", "its schema refuses");
    check("c_bad", "denied", "path");
    check("c_note", "ok", "noted content");
    check("c_note", "ok", "checked by guard");
    check("c_slow", "denied", "did not answer within 1.0 s");
    check("c_crash", "denied", "guard fell over");
    check("c_garbage", "denied", "not a hook decision");
    check("c_plain", "ok", "hello from notes");

    // The observers saw every call, including the denied ones; the crashing one changed nothing.
    let seen = hook_log(&recorder.join("seen.jsonl"));
    assert_eq!(seen.len(), cases.len(), "{seen:?}");
    for entry in &seen {
        assert_eq!(entry["hook"], "post_tool_call");
        assert_eq!(entry["plugin"], "recorder");
        assert_eq!(entry["tool"], "read_file");
        assert_eq!(entry["agent_path"].as_array().unwrap().len(), 1);
        assert_eq!(entry["depth"], 0);
    }
    let rewritten = seen
        .iter()
        .find(|e| e["status"] == "ok" && e["result"].as_str().unwrap().contains("path rewritten"))
        .unwrap();
    assert_eq!(rewritten["arguments"]["path"], "notes.txt");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

const SUBAGENT_GUARD: &str = r#"#!/usr/bin/env python3
import json, sys
call = json.load(sys.stdin)
if call["depth"] >= 1 and "private" in call["arguments"].get("path", ""):
    print(json.dumps({"decision": "deny", "reason": "subagents may not read private files"}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn hooks_see_the_agent_path_and_treat_subagents_differently() {
    let w = World::new();
    std::fs::write(w.project().join("private.txt"), "top secret plans\n").unwrap();
    let plugin = w.plugin(
        &w.user_plugins(),
        "subagent-guard",
        "hooks:\n  pre_tool_call: {command: python3 guard.py, timeout: 10s, tools: [read_file]}\n  post_tool_call: python3 record.py\n  on_subagent_start: python3 record.py\n  on_subagent_end: python3 record.py\n  on_session_start: python3 record.py\n  on_session_end: python3 record.py\n",
        &[("guard.py", SUBAGENT_GUARD), ("record.py", RECORD)],
    );
    w.config("plugins:\n  enabled: [subagent-guard]\n");
    let script = r#"
turns:
  - match: ROOTQ
    tool_calls:
      - {id: r1, name: read_file, arguments: {path: private.txt}}
      - {id: r2, name: delegate_task, arguments: {tasks: [{goal: "CHILDTASK read private.txt"}]}}
  - match: CHILD-REPORT
    text: all done
  - match: CHILDTASK
    tool_calls:
      - {id: k1, name: read_file, arguments: {path: private.txt}}
  - match: subagents may not
    text: CHILD-REPORT denied as expected
"#;
    let (out, requests) = w.chat("ROOTQ look at private.txt", script).await;
    assert_success(&out);
    let said = tool_results(&requests);
    assert!(said["r1"].contains("top secret plans"), "{}", said["r1"]);
    assert!(
        said["k1"].contains("subagents may not read private files"),
        "{}",
        said["k1"]
    );
    let seen = hook_log(&plugin.join("seen.jsonl"));
    let reads: Vec<_> = seen
        .iter()
        .filter(|e| e["hook"] == "post_tool_call" && e["tool"] == "read_file")
        .collect();
    assert_eq!(reads.len(), 2, "{seen:?}");
    let root = reads.iter().find(|e| e["depth"] == 0).unwrap();
    let child = reads.iter().find(|e| e["depth"] == 1).unwrap();
    assert_eq!(root["status"], "ok");
    assert_eq!(child["status"], "denied");
    let child_path = child["agent_path"].as_array().unwrap();
    assert_eq!(child_path.len(), 2);
    assert_eq!(child_path[0], root["agent_path"][0]);
    let started = seen
        .iter()
        .find(|e| e["hook"] == "on_subagent_start")
        .unwrap();
    assert_eq!(started["goal"], "CHILDTASK read private.txt");
    assert_eq!(started["agent_path"], child["agent_path"]);
    let ended = seen
        .iter()
        .find(|e| e["hook"] == "on_subagent_end")
        .unwrap();
    assert_eq!(ended["status"], "completed");
    assert!(ended["summary"].as_str().unwrap().contains("CHILD-REPORT"));
    // Both sessions started and ended, the child's path one longer.
    for point in ["on_session_start", "on_session_end"] {
        let depths: Vec<_> = seen
            .iter()
            .filter(|e| e["hook"] == point)
            .map(|e| e["depth"].as_u64().unwrap())
            .collect();
        assert!(
            depths.contains(&0) && depths.contains(&1),
            "{point}: {depths:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_hooks_section_stops_the_chat_with_the_key() {
    let w = World::new();
    w.config("hooks:\n  pre_tool_call: {timeout: 5s}\n");
    let (out, _) = w.chat("hi", "- text: hi\n").await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("hooks.pre_tool_call.command"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn hooks_see_calls_made_from_an_execute_code_script() {
    let w = World::new();
    std::fs::write(w.project().join("notes.txt"), "hello from notes\n").unwrap();
    std::fs::write(w.project().join("secret.txt"), "do not show\n").unwrap();
    crate::support::plugin_world::write_script(&w.project().join("hooks/guard.sh"), GUARD);
    let recorder = w.plugin(
        &w.user_plugins(),
        "recorder",
        "hooks:\n  post_tool_call: python3 record.py\n",
        &[("record.py", RECORD)],
    );
    w.config(
        "hooks:\n  pre_tool_call: {command: ./hooks/guard.sh, timeout: 5s, tools: [read_file]}\nplugins:\n  enabled: [recorder]\n",
    );
    let code = "from troupe_tools import read_file\nprint('OPEN:', read_file('notes.txt'))\nprint('SHUT:', read_file('secret.txt'))\n";
    let script = format!(
        "turns:\n  - tool_calls:\n      - {{id: x1, name: execute_code, arguments: {{code: {}}}}}\n  - text: done\n",
        serde_json::to_string(code).unwrap()
    );
    let (out, requests) = w.chat("run the script", &script).await;
    assert_success(&out);
    let said = tool_results(&requests);
    let shown = &said["x1"];
    assert!(shown.contains("hello from notes"), "{shown}");
    assert!(shown.contains("secret files stay closed"), "{shown}");
    assert!(!shown.contains("do not show"), "{shown}");
    let seen = hook_log(&recorder.join("seen.jsonl"));
    let mut reads: Vec<(String, String)> = seen
        .iter()
        .filter(|e| e["tool"] == "read_file")
        .map(|e| {
            (
                e["arguments"]["path"].as_str().unwrap().to_string(),
                e["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    reads.sort();
    assert_eq!(
        reads,
        vec![
            ("notes.txt".to_string(), "ok".to_string()),
            ("secret.txt".to_string(), "denied".to_string())
        ],
        "{seen:?}"
    );
    assert!(seen.iter().any(|e| e["tool"] == "execute_code"));
}
