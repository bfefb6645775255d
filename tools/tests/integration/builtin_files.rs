//! The file tools on real files: paging, UTF-16 in both byte orders with and without BOM,
//! binary and oversized refusals, atomic writes seen by a concurrent reader, patch rules, the
//! multi-file patch, search, and paths that need approval.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::support::{Fixture, ctx, json_of};
use serde_json::json;

fn utf16(text: &str, big: bool, bom: bool) -> Vec<u8> {
    let mut out = vec![];
    if bom {
        out.extend(if big { [0xFE, 0xFF] } else { [0xFF, 0xFE] });
    }
    for u in text.encode_utf16() {
        out.extend(if big {
            u.to_be_bytes()
        } else {
            u.to_le_bytes()
        });
    }
    out
}

#[tokio::test]
async fn pages_numbered_lines() {
    let f = Fixture::new();
    let text: String = (1..=1200).map(|i| format!("row {i}\n")).collect();
    std::fs::write(f.work().join("big.txt"), text).unwrap();
    let (v, _) = f
        .call(
            "read_file",
            json!({"path": "big.txt", "offset": 2, "limit": 3}),
        )
        .await;
    assert_eq!(v["content"], "2|row 2\n3|row 3\n4|row 4\n");
    assert_eq!(v["total_lines"], 1200);
    assert!(v["hint"].as_str().unwrap().contains("offset=5"));
    let (v, _) = f
        .call("read_file", json!({"path": "big.txt", "offset": 5000}))
        .await;
    assert!(v["hint"].as_str().unwrap().contains("1200 lines"));
    std::fs::write(f.work().join("empty.txt"), "").unwrap();
    let (v, _) = f.call("read_file", json!({"path": "empty.txt"})).await;
    assert!(v["hint"].as_str().unwrap().contains("empty"));
    let (v, err) = f.call("read_file", json!({"path": "bigg.txt"})).await;
    assert!(err && v["error"].as_str().unwrap().contains("not found"));
    assert!(
        v["similar_files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap().ends_with("big.txt"))
    );
}

#[tokio::test]
async fn utf16_files_in_both_byte_orders_with_and_without_bom() {
    let f = Fixture::new();
    for big in [false, true] {
        for bom in [false, true] {
            let name = format!("u16-{big}-{bom}.txt");
            std::fs::write(
                f.work().join(&name),
                utf16("hello\r\nwörld 世界\r\n", big, bom),
            )
            .unwrap();
            let (v, err) = f.call("read_file", json!({"path": name})).await;
            assert!(!err, "{v}");
            assert_eq!(
                v["content"], "1|hello\n2|wörld 世界\n",
                "big={big} bom={bom}"
            );
            let order = if big { "UTF-16-BE" } else { "UTF-16-LE" };
            assert!(v["hint"].as_str().unwrap().contains(order));
        }
    }
}

#[tokio::test]
async fn binary_and_oversized_files_are_refused() {
    let f = Fixture::new();
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    png.extend(vec![0u8; 4000]);
    std::fs::write(f.work().join("pic.png"), &png).unwrap();
    let (v, err) = f.call("read_file", json!({"path": "pic.png"})).await;
    assert!(err && v["is_binary"] == true);
    assert!(v["error"].as_str().unwrap().contains("PNG image"));
    let big = vec![b'a'; 11 * 1024 * 1024];
    std::fs::write(f.work().join("huge.txt"), big).unwrap();
    let (v, err) = f.call("read_file", json!({"path": "huge.txt"})).await;
    assert!(err && v["error"].as_str().unwrap().contains("10 MiB"));
    let (v, err) = f.call("read_file", json!({"path": "."})).await;
    assert!(!err && v["directory"] == true, "{v}");
}

#[tokio::test]
async fn write_file_is_atomic_and_creates_directories() {
    let f = Fixture::new();
    let (v, err) = f
        .call(
            "write_file",
            json!({"path": "a/b/c.txt", "content": "first"}),
        )
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["dirs_created"], 2);
    assert_eq!(v["verified"], true);
    // A reader polling the file while it is rewritten only ever sees a whole version.
    let path = f.work().join("a/b/c.txt");
    let one = "1".repeat(300_000);
    let two = "2".repeat(300_000);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (path, stop, one, two) = (path.clone(), stop.clone(), one.clone(), two.clone());
        std::thread::spawn(move || {
            let mut seen = 0;
            while !stop.load(Ordering::Acquire) {
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(
                    text == "first" || text == one || text == two,
                    "a reader saw a partial file of {} bytes",
                    text.len()
                );
                seen += 1;
            }
            seen
        })
    };
    for i in 0..40 {
        let content = if i % 2 == 0 { &one } else { &two };
        let (_, err) = f
            .call(
                "write_file",
                json!({"path": "a/b/c.txt", "content": content}),
            )
            .await;
        assert!(!err);
    }
    stop.store(true, Ordering::Release);
    assert!(reader.join().unwrap() > 0);
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "temporary files were left behind");
    let (v, err) = f
        .call(
            "write_file",
            json!({"path": "x.json", "content": "{not json"}),
        )
        .await;
    assert!(err && v["error"].as_str().unwrap().contains("not valid JSON"));
    assert!(!f.work().join("x.json").exists());
    let (_, err) = f
        .call(
            "write_file",
            json!({"path": "y.txt", "content": "1|a\n2|b\n3|c\n"}),
        )
        .await;
    assert!(err);
}

#[tokio::test]
async fn patch_rules() {
    let f = Fixture::new();
    std::fs::write(
        f.work().join("m.rs"),
        "let a = 1;\nlet b = 1;\nlet a = 1;\n",
    )
    .unwrap();
    let (v, err) = f
        .call(
            "patch",
            json!({"path": "m.rs", "old_string": "let a = 1;", "new_string": "let a = 2;"}),
        )
        .await;
    assert!(err);
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains("matches 2 places") && msg.contains("L1:") && msg.contains("L3:"),
        "{msg}"
    );
    let (v, err) = f
        .call(
            "patch",
            json!({"path": "m.rs", "old_string": "let b = 1;", "new_string": "let bee = 5;"}),
        )
        .await;
    assert!(!err && v["diff"].as_str().unwrap().contains("+let bee = 5;"));
    let (v, _) = f.call("patch", json!({"path": "m.rs", "old_string": "let a = 1;", "new_string": "let a = 9;", "replace_all": true})).await;
    assert_eq!(v["replacements"], 2);
    assert_eq!(
        std::fs::read_to_string(f.work().join("m.rs")).unwrap(),
        "let a = 9;\nlet bee = 5;\nlet a = 9;\n"
    );
    let (v, err) = f
        .call(
            "patch",
            json!({"path": "m.rs", "old_string": "let b = 1;", "new_string": "let bee = 5;"}),
        )
        .await;
    assert!(!err && v["no_change"] == true, "{v}");

    std::fs::write(f.work().join("gone.txt"), "bye\n").unwrap();
    std::fs::write(f.work().join("old.txt"), "moving\n").unwrap();
    let patch = "*** Begin Patch\n*** Update File: m.rs\n let a = 9;\n-let bee = 5;\n+let b = 6;\n*** Add File: new/n.txt\n+fresh\n*** Delete File: gone.txt\n*** Move File: old.txt -> moved/old.txt\n*** End Patch\n";
    let (v, err) = f
        .call("patch", json!({"mode": "patch", "patch": patch}))
        .await;
    assert!(!err, "{v}");
    assert!(
        std::fs::read_to_string(f.work().join("m.rs"))
            .unwrap()
            .contains("let b = 6;")
    );
    assert_eq!(
        std::fs::read_to_string(f.work().join("new/n.txt")).unwrap(),
        "fresh\n"
    );
    assert!(!f.work().join("gone.txt").exists());
    assert_eq!(
        std::fs::read_to_string(f.work().join("moved/old.txt")).unwrap(),
        "moving\n"
    );
    // All or nothing: a failing section leaves every file as it was.
    let bad = "*** Begin Patch\n*** Add File: another.txt\n+x\n*** Update File: m.rs\n-no such line\n+y\n*** End Patch\n";
    let (_, err) = f
        .call("patch", json!({"mode": "patch", "patch": bad}))
        .await;
    assert!(err);
    assert!(!f.work().join("another.txt").exists());
    let (v, err) = f.call("patch", json!({"mode": "patch", "patch": "*** Begin Patch\n*** Delete File: ../x\n*** End Patch"})).await;
    assert!(err && v["error"].as_str().unwrap().contains(".."));
}

#[tokio::test]
async fn search_contents_and_names() {
    let f = Fixture::new();
    let w = f.work();
    std::fs::create_dir_all(w.join("src/deep")).unwrap();
    std::fs::create_dir_all(w.join("target/debug")).unwrap();
    std::fs::create_dir_all(w.join(".git")).unwrap();
    std::fs::write(w.join("src/lib.rs"), "fn alpha() {}\nfn beta() {}\n").unwrap();
    std::fs::write(w.join("src/deep/x.rs"), "fn alpha_two() {}\n").unwrap();
    std::fs::write(w.join("target/debug/gen.rs"), "fn alpha() {}\n").unwrap();
    std::fs::write(w.join(".git/config"), "alpha\n").unwrap();
    std::fs::write(w.join("notes.md"), "alpha notes\n").unwrap();
    let (v, _) = f.call("search_files", json!({"pattern": "fn alpha"})).await;
    assert_eq!(v["total_count"], 2, "{v}");
    assert_eq!(v["matches"][0]["path"], "src/lib.rs");
    assert_eq!(v["matches"][1]["path"], "src/deep/x.rs");
    let (v, _) = f
        .call(
            "search_files",
            json!({"pattern": "alpha", "file_glob": "*.md"}),
        )
        .await;
    assert_eq!(v["total_count"], 1);
    let (v, _) = f
        .call(
            "search_files",
            json!({"pattern": "*.rs", "target": "files"}),
        )
        .await;
    assert_eq!(v["files"], json!(["src/lib.rs", "src/deep/x.rs"]));
    let (v, _) = f
        .call(
            "search_files",
            json!({"pattern": "alpha", "output_mode": "count"}),
        )
        .await;
    assert_eq!(v["counts"]["notes.md"], 1);
    let (v, _) = f
        .call("search_files", json!({"pattern": "fn", "limit": 1}))
        .await;
    assert_eq!(v["truncated"], true);
    assert!(v["hint"].as_str().unwrap().contains("offset=1"));
    let (v, err) = f
        .call("search_files", json!({"pattern": "(unclosed"}))
        .await;
    assert!(err && v["error"].as_str().unwrap().contains("regular expression"));
}

/// The call embedded in a message, sent back exactly as written.
fn suggested_call(error: &str) -> serde_json::Value {
    let start = error.find('{').unwrap();
    let end = error.rfind('}').unwrap();
    serde_json::from_str(&error[start..=end]).unwrap()
}

#[tokio::test]
async fn listing_a_directory_the_wrong_way_still_lists_it() {
    let f = Fixture::new();
    let w = f.work();
    std::fs::create_dir_all(w.join("data/sub")).unwrap();
    for name in ["data/alpha.txt", "data/beta.txt", "data/sub/gamma.txt"] {
        std::fs::write(w.join(name), "x\n").unwrap();
    }
    let listed = json!(["data/alpha.txt", "data/beta.txt", "data/sub/gamma.txt"]);
    // read_file on a directory answers with its entries and the search_files call that lists
    // every file below it.
    let (v, err) = f.call("read_file", json!({"path": "data"})).await;
    assert!(!err, "{v}");
    assert_eq!(v["entries"], json!(["alpha.txt", "beta.txt", "sub/"]));
    let hint = v["hint"].as_str().unwrap();
    assert!(hint.contains("is a directory"), "{v}");
    let (v, err) = f.call("search_files", suggested_call(hint)).await;
    assert!(!err, "{v}");
    let mut files: Vec<String> = serde_json::from_value(v["files"].clone()).unwrap();
    files.sort();
    assert_eq!(json!(files), listed);
    // Looking for files with no pattern gets the glob that lists them, on the same path.
    let (v, err) = f
        .call("search_files", json!({"target": "files", "path": "data"}))
        .await;
    let error = v["error"].as_str().unwrap();
    assert!(err && error.contains("'pattern' is required"), "{v}");
    let (v, err) = f.call("search_files", suggested_call(error)).await;
    assert!(!err, "{v}");
    let mut files: Vec<String> = serde_json::from_value(v["files"].clone()).unwrap();
    files.sort();
    assert_eq!(json!(files), listed);
    // Searching contents with no pattern keeps the plain message.
    let (v, err) = f.call("search_files", json!({"path": "data"})).await;
    assert!(
        err && v["error"].as_str().unwrap().contains("fn main"),
        "{v}"
    );
}

#[tokio::test]
async fn paths_outside_the_roots_and_sensitive_files_need_approval() {
    let f = Fixture::new();
    let outside = f.dir.path().join("outside.txt");
    std::fs::write(&outside, "secret-ish\n").unwrap();
    let (v, err) = f.call("read_file", json!({"path": outside})).await;
    assert!(err && v["status"] == "blocked", "{v}");
    let approved = f
        .call_ctx(
            "read_file",
            json!({"path": outside}),
            ctx("s1").with_approval(true),
        )
        .await;
    assert_eq!(json_of(&approved)["content"], "1|secret-ish\n");
    let (v, err) = f
        .call("write_file", json!({"path": ".env", "content": "A=1\n"}))
        .await;
    assert!(err && v["error"].as_str().unwrap().contains("environment file"));
    assert!(!f.work().join(".env").exists());
    assert!(
        f.builtins
            .path_needs_approval(
                "s1",
                "~/.ssh/authorized_keys",
                troupe_tools::builtin::PathAccess::Write
            )
            .is_some()
    );
    assert!(
        f.builtins
            .path_needs_approval(
                "s1",
                "src/main.rs",
                troupe_tools::builtin::PathAccess::Write
            )
            .is_none()
    );
}
