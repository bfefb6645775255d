use super::actor::{log_value, may_read};
use super::*;

#[test]
fn continuations_see_their_predecessors() {
    let mut prev = HashMap::new();
    prev.insert("b".to_string(), "a".to_string());
    prev.insert("c".to_string(), "b".to_string());
    assert!(may_read(&prev, "c", "a"));
    assert!(may_read(&prev, "a", "a"));
    assert!(!may_read(&prev, "a", "c"));
    assert!(!may_read(&prev, "x", "a"));
}

#[test]
fn log_pages_by_line() {
    let out: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    let tail = log_value("p", "c", "exited", &out, None, 3);
    assert_eq!(tail["output"], "line 8\nline 9\nline 10");
    assert_eq!(tail["total_lines"], 10);
    assert_eq!(tail["showing"], "3 lines");
    let head = log_value("p", "c", "exited", &out, Some(0), 2);
    assert_eq!(head["output"], "line 1\nline 2");
}
