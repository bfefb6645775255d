//! The MCP servers this process is starting right now, with when each began: read by the
//! command line's status line ("starting MCP servers: github 2.1 s") so a slow server is not
//! a silent wait. A server is listed from the moment its connection opens until it answered
//! (or failed); the list is process-wide because managers are made deep inside the runtime.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sync::lock;

/// The servers being started: an id (to remove the right entry), the name, the start.
static STARTING: Mutex<Vec<(u64, String, Instant)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Lists a server as starting until the mark is dropped.
#[derive(Debug)]
pub(crate) struct StartingMark(u64);

/// Lists `name` as starting; the entry goes when the mark is dropped.
pub(crate) fn mark(name: &str) -> StartingMark {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    lock(&STARTING).push((id, name.to_string(), Instant::now()));
    StartingMark(id)
}

impl Drop for StartingMark {
    fn drop(&mut self) {
        lock(&STARTING).retain(|(id, _, _)| *id != self.0);
    }
}

/// The servers being started now and how long each has taken so far, longest first.
pub fn starting_now() -> Vec<(String, Duration)> {
    let mut now: Vec<(String, Duration)> = lock(&STARTING)
        .iter()
        .map(|(_, name, at)| (name.clone(), at.elapsed()))
        .collect();
    now.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_listed_while_its_mark_lives() {
        let first = mark("alpha-starting-test");
        let second = mark("beta-starting-test");
        let names = |list: Vec<(String, Duration)>| -> Vec<String> {
            list.into_iter()
                .map(|(n, _)| n)
                .filter(|n| n.ends_with("-starting-test"))
                .collect()
        };
        assert_eq!(
            names(starting_now()),
            ["alpha-starting-test", "beta-starting-test"]
        );
        drop(first);
        assert_eq!(names(starting_now()), ["beta-starting-test"]);
        drop(second);
        assert!(names(starting_now()).is_empty());
    }
}
