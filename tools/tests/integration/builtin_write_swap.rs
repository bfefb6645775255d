//! `write_file` and `patch` while a directory of the workspace keeps being swapped with a
//! symbolic link to a folder outside it (issue 37, point 6): a thread exchanges the two names
//! atomically (`renameat2` with `RENAME_EXCHANGE`) as fast as it can while 300 `write_file` and
//! 300 `patch` calls run through the tools. Nothing may land outside, every `verified: true` must
//! be true of the file afterwards, and no temporary file may be left anywhere.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::support::Fixture;
use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
use serde_json::json;

/// Every file below `dir` (links not followed), recursively.
fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            out.extend(all_files(&entry.path()));
        } else {
            out.push(entry.path());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_link_never_redirects_a_write() {
    let f = Fixture::new();
    let work = f.work();
    let outside = f.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(work.join("sub")).unwrap();
    std::fs::write(work.join("sub/p.txt"), "value 0\n").unwrap();
    std::os::unix::fs::symlink(&outside, work.join("alt")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps, work) = (stop.clone(), swaps.clone(), work.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                renameat2(
                    AT_FDCWD,
                    &work.join("sub"),
                    AT_FDCWD,
                    &work.join("alt"),
                    RenameFlags::RENAME_EXCHANGE,
                )
                .unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let mut verified = vec![];
    let (mut refused, mut patched) = (0, 0);
    let mut expected_p = "value 0".to_string();
    let mut patch_errors = vec![];
    for i in 0..300 {
        let content = format!("write {i}\n");
        let path = format!("sub/f{i}.txt");
        let (v, err) = f
            .call("write_file", json!({"path": path, "content": content}))
            .await;
        if err {
            refused += 1;
        } else if v["verified"] == true {
            verified.push((format!("f{i}.txt"), content));
        }
        {
            let next = format!("value {}", i + 1);
            let (v, err) = f
                .call(
                    "patch",
                    json!({"path": "sub/p.txt", "old_string": expected_p, "new_string": next}),
                )
                .await;
            if !err && v["success"] == true && v.get("no_change").is_none() {
                assert_eq!(v["verified"], true, "{v}");
                expected_p = next;
                patched += 1;
            } else {
                patch_errors.push(v);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    // Put the real directory back under its own name.
    if work.join("sub").is_symlink() {
        renameat2(
            AT_FDCWD,
            &work.join("sub"),
            AT_FDCWD,
            &work.join("alt"),
            RenameFlags::RENAME_EXCHANGE,
        )
        .unwrap();
    }

    assert!(swaps.load(Ordering::Relaxed) > 1000, "the swapper ran");
    let escaped = all_files(&outside);
    assert!(escaped.is_empty(), "written outside: {escaped:?}");
    for (name, content) in &verified {
        assert_eq!(
            std::fs::read_to_string(work.join("sub").join(name)).unwrap(),
            *content,
            "{name} was reported verified"
        );
    }
    assert_eq!(
        std::fs::read_to_string(work.join("sub/p.txt")).unwrap(),
        format!("{expected_p}\n")
    );
    let temps: Vec<_> = all_files(f.dir.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(temps.is_empty(), "temporary files left: {temps:?}");
    // The race was real (writes were refused while the link was in place); once it stops,
    // writes get through again.
    assert!(refused > 0, "verified {} refused {refused}", verified.len());
    let (v, err) = f
        .call(
            "write_file",
            json!({"path": "sub/after.txt", "content": "calm\n"}),
        )
        .await;
    assert!(!err && v["verified"] == true, "{v}");
    // Every patch that was not applied was refused, never half done.
    assert!(
        patch_errors
            .iter()
            .all(|v| v["status"] == "blocked" || v["error"].is_string()),
        "{patch_errors:?}"
    );
    let _ = patched;
}
