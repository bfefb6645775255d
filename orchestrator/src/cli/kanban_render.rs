//! How `troupe kanban` shows boards to people: aligned tables for `list`, `boards list`, `runs`
//! and `stats`, the detail view of `show`, one line per event for `watch`, and the short spans
//! and clipped titles the demo's live view also uses. JSON output does not come through here.
//! Everything shown comes from the board, which anyone with access can write: control
//! characters in it are shown as escapes, never sent to the terminal.

use std::fmt::Write as _;

use troupe_kanban::domain::{Board, BoardStats, Event, Run, Task, TaskStatus, Timestamp};
use troupe_tools::text::clip_chars;

use super::chat::display::thousands;
use super::visible::{visible, visible_line};
use crate::kanban_api::TaskDetail;

/// A table: a header row, then rows, columns padded to the widest cell. The last column is not
/// padded, so long titles do not leave trailing blanks.
pub(crate) struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: Vec<&'static str>) -> Table {
        Table {
            header,
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows
            .push(cells.iter().map(|c| visible_line(c)).collect());
    }

    pub(crate) fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        for row in std::iter::once(&header).chain(self.rows.iter()) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate().take(columns) {
                if i + 1 == columns {
                    line.push_str(cell);
                } else {
                    let pad = widths[i] - cell.chars().count();
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `troupe kanban list`.
pub(crate) fn task_table(tasks: &[Task]) -> String {
    if tasks.is_empty() {
        return "no tasks match\n".to_string();
    }
    let mut table = Table::new(vec!["ID", "STATUS", "PRI", "ASSIGNEE", "UPDATED", "TITLE"]);
    let now = Timestamp::now();
    for task in tasks {
        table.row(vec![
            task.id.to_string(),
            task.status.to_string(),
            task.priority.to_string(),
            task.assignee.clone().unwrap_or_else(|| "-".into()),
            age(now, task.updated_at),
            clip(&task.title, 60),
        ]);
    }
    let mut out = table.render();
    let _ = writeln!(out, "{} task(s)", tasks.len());
    out
}

/// `troupe kanban boards list`.
pub(crate) fn board_table(boards: &[Board], current: &str) -> String {
    let mut table = Table::new(vec!["", "SLUG", "NAME", "STATE", "DESCRIPTION"]);
    for board in boards {
        table.row(vec![
            if board.slug.as_str() == current {
                "*"
            } else {
                ""
            }
            .to_string(),
            board.slug.to_string(),
            board.name.clone(),
            if board.archived_at.is_some() {
                "archived"
            } else {
                "active"
            }
            .to_string(),
            clip(&board.description, 50),
        ]);
    }
    table.render()
}

/// `troupe kanban stats`: one row per status with a bar scaled to the largest count.
pub(crate) fn stats_table(board: &str, stats: &BoardStats) -> String {
    let total: u64 = stats.by_status.iter().map(|(_, n)| n).sum();
    let largest = stats
        .by_status
        .iter()
        .map(|(_, n)| *n)
        .max()
        .unwrap_or(0)
        .max(1);
    let mut table = Table::new(vec!["STATUS", "TASKS", "SHARE", ""]);
    for status in TaskStatus::ALL {
        let n = stats.count(status);
        let share = if total == 0 {
            0.0
        } else {
            n as f64 * 100.0 / total as f64
        };
        let bar = "#".repeat(((n * 30).div_ceil(largest)) as usize);
        table.row(vec![
            status.to_string(),
            n.to_string(),
            format!("{share:.0}%"),
            bar,
        ]);
    }
    let mut out = format!("board {board}\n");
    out.push_str(&table.render());
    let _ = writeln!(
        out,
        "total {total}, open runs {}, last event #{}",
        stats.open_runs, stats.last_event_id.0
    );
    out
}

/// `troupe kanban runs`.
pub(crate) fn run_table(runs: &[Run]) -> String {
    if runs.is_empty() {
        return "no runs yet\n".to_string();
    }
    let mut table = Table::new(vec![
        "RUN",
        "PROFILE",
        "FROM",
        "OUTCOME",
        "TOOK",
        "SPENT",
        "WORKER",
        "SUMMARY / ERROR",
    ]);
    for run in runs {
        let took = match run.ended_at {
            Some(end) => seconds(end.0 - run.started_at.0),
            None => "running".into(),
        };
        table.row(vec![
            run.id.to_string(),
            run.profile.clone().unwrap_or_else(|| "-".into()),
            run.source_status.to_string(),
            run.outcome.map_or_else(|| "-".into(), |o| o.to_string()),
            took,
            spent(run.usage.as_ref()),
            run.worker
                .as_ref()
                .map_or_else(|| "-".into(), |w| format!("{}:{}", w.host, w.pid)),
            clip(
                run.summary
                    .as_deref()
                    .or(run.error.as_deref())
                    .unwrap_or(""),
                60,
            ),
        ]);
    }
    table.render()
}

/// `troupe kanban show`.
pub(crate) fn task_detail(detail: &TaskDetail) -> String {
    let t = &detail.task;
    let mut out = String::new();
    let _ = writeln!(out, "{}  {}", t.id, t.title);
    let _ = writeln!(
        out,
        "status {}  priority {}  assignee {}",
        t.status,
        t.priority,
        t.assignee.as_deref().unwrap_or("-")
    );
    if let Some(tenant) = &t.tenant {
        let _ = writeln!(out, "tenant {tenant}");
    }
    if let Some(secs) = t.max_runtime_seconds {
        let _ = writeln!(out, "max runtime {}", seconds(secs as i64 * 1000));
    }
    if let Some(key) = &t.idempotency_key {
        let _ = writeln!(out, "idempotency key {key}");
    }
    if let Some(reason) = &t.block_reason {
        let _ = writeln!(
            out,
            "blocked ({}): {reason}",
            t.block_kind.as_deref().unwrap_or("?")
        );
    }
    if let Some(error) = &t.last_failure_error {
        let _ = writeln!(
            out,
            "last failure ({} in a row): {error}",
            t.consecutive_failures
        );
    }
    if let Some(lease) = &t.lease {
        let _ = writeln!(
            out,
            "held by {} (run {}), lease ends in {}",
            lease.worker,
            lease.run_id,
            seconds(lease.expires_at.0 - Timestamp::now().0)
        );
    }
    let ids = |ids: &[troupe_kanban::domain::TaskId]| {
        if ids.is_empty() {
            "-".to_string()
        } else {
            ids.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let _ = writeln!(out, "parents {}", ids(&detail.links.parents));
    let _ = writeln!(out, "children {}", ids(&detail.links.children));
    if !t.body.is_empty() {
        let _ = writeln!(out, "\n{}", t.body.trim_end());
    }
    if let Some(result) = &t.result {
        let _ = writeln!(out, "\nresult:\n{}", result.trim_end());
    }
    if !detail.comments.is_empty() {
        let _ = writeln!(out, "\ncomments:");
        for c in &detail.comments {
            let _ = writeln!(out, "  [{}] {}: {}", c.id, c.author, c.body.trim_end());
        }
    }
    let used: Vec<&serde_json::Value> = detail
        .runs
        .iter()
        .filter_map(|r| r.usage.as_ref())
        .collect();
    if !used.is_empty() {
        let sum = |key: &str| used.iter().filter_map(|u| u[key].as_f64()).sum::<f64>();
        let total = serde_json::json!({
            "input_tokens": sum("input_tokens"),
            "output_tokens": sum("output_tokens"),
            "cost_usd": sum("cost_usd"),
        });
        let _ = writeln!(
            out,
            "spent {} over {} run(s)",
            spent(Some(&total)),
            used.len()
        );
    }
    if !detail.runs.is_empty() {
        let _ = writeln!(out, "\nruns:");
        for line in run_table(&detail.runs).lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    let _ = writeln!(out, "\nevents:");
    for e in &detail.events {
        let _ = writeln!(out, "  {}", event_line(e));
    }
    visible(&out)
}

/// What a run spent, from its recorded usage: `1,234 tok $0.0120`, or `-`.
fn spent(usage: Option<&serde_json::Value>) -> String {
    let Some(usage) = usage else {
        return "-".into();
    };
    let tokens = ["input_tokens", "output_tokens"]
        .iter()
        .filter_map(|k| usage[*k].as_f64())
        .sum::<f64>();
    let mut text = format!("{} tok", thousands(tokens as u64));
    if let Some(cost) = usage["cost_usd"].as_f64().filter(|c| *c > 0.0) {
        let _ = write!(text, " ${cost:.4}");
    }
    text
}

/// One event for `watch` and `show`: `#id kind task payload`.
pub(crate) fn event_line(event: &Event) -> String {
    let task = event
        .task_id
        .as_ref()
        .map_or_else(|| "-".to_string(), ToString::to_string);
    let payload = match &event.payload {
        serde_json::Value::Null => String::new(),
        serde_json::Value::Object(map) if map.is_empty() => String::new(),
        other => clip(&other.to_string(), 120),
    };
    visible_line(
        format!(
            "#{:<5} {:<18} {task:<10} {payload}",
            event.id.0,
            event.kind.as_str()
        )
        .trim_end(),
    )
}

/// A span of milliseconds, short: `850ms`, `12.3s`, `4m05s`, `2h10m`.
pub(crate) fn seconds(millis: i64) -> String {
    let ms = millis.max(0);
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

/// How long ago, short: `5s`, `3m`, `2h`, `4d`.
fn age(now: Timestamp, then: Timestamp) -> String {
    let secs = ((now.0 - then.0) / 1000).max(0);
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86_400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// Cuts text to `max` characters on one line, with an ellipsis; other control characters are
/// shown as escapes.
pub(crate) fn clip(text: &str, max: usize) -> String {
    clip_chars(&visible_line(&text.replace(['\n', '\r'], " ")), max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let mut t = Table::new(vec!["A", "LONGER", "LAST"]);
        t.row(vec!["xyz".into(), "1".into(), "tail".into()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "A    LONGER  LAST");
        assert_eq!(lines[1], "xyz  1       tail");
    }

    #[test]
    fn spans_and_clips() {
        assert_eq!(seconds(850), "850ms");
        assert_eq!(seconds(12_300), "12.3s");
        assert_eq!(seconds(245_000), "4m05s");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("a\nb", 10), "a b");
    }
}
