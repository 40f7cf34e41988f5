//! What goes to stderr: the progress bar while loading, the summary after.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};
use leash_loader::{LoadReport, ProgressSnapshot};

use super::args::ProgressMode;

/// The progress bar (hidden unless enabled).
#[derive(Debug)]
pub(crate) struct ProgressView {
    bar: Option<ProgressBar>,
}

impl ProgressView {
    /// A bar on stderr if `mode` says so (auto: stderr is a terminal).
    pub(crate) fn new(mode: ProgressMode) -> Self {
        let show = match mode {
            ProgressMode::Always => true,
            ProgressMode::Never => false,
            ProgressMode::Auto => std::io::stderr().is_terminal(),
        };
        if !show {
            return ProgressView { bar: None };
        }
        // indicatif draws nothing to a non-terminal; `always` then prints
        // one progress line per second instead.
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::term_like_with_hz(Box::new(PlainLines), 1)
        };
        let bar = ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} kinds  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        ProgressView { bar: Some(bar) }
    }

    /// Show the counters.
    pub(crate) fn update(&self, p: ProgressSnapshot) {
        if let Some(bar) = &self.bar {
            bar.set_length(p.kinds_total);
            bar.set_position(p.kinds_done);
            bar.set_message(format!(
                "{} objects  {} pages  {} retries",
                p.objects, p.pages, p.retries
            ));
        }
    }

    /// Remove the bar.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// A "terminal" that prints each progress line as a line of its own.
#[derive(Debug)]
struct PlainLines;

impl TermLike for PlainLines {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        if !s.trim().is_empty() {
            eprintln!("{s}");
        }
        Ok(())
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.write_line(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The summary table: one row per kind (and namespace), then totals.
pub(crate) fn summary(report: &LoadReport, discovery: Duration) -> String {
    let rows: Vec<[String; 6]> = report
        .kinds
        .iter()
        .map(|k| {
            [
                k.label(),
                k.objects.to_string(),
                k.pages.to_string(),
                k.retries.to_string(),
                k.restarts.to_string(),
                format!("{:.2}", k.elapsed.as_secs_f64()),
            ]
        })
        .collect();
    let notes: Vec<String> = report
        .kinds
        .iter()
        .map(|k| {
            let mut note = Vec::new();
            if k.across_snapshots {
                note.push("across snapshots".to_owned());
            }
            if let Some(err) = &k.error {
                note.push(format!("INCOMPLETE: {err}"));
            }
            note.join("; ")
        })
        .collect();
    let header = ["KIND", "OBJECTS", "PAGES", "RETRIES", "RESTARTS", "SECONDS"];
    let complete = report.kinds.iter().filter(|k| k.is_complete()).count();
    let total = [
        format!("TOTAL ({complete}/{} complete)", report.kinds.len()),
        report.objects().to_string(),
        report.pages().to_string(),
        report.retries().to_string(),
        report.restarts().to_string(),
        format!("{:.2}", report.elapsed.as_secs_f64()),
    ];
    let mut widths = header.map(str::len);
    for row in rows.iter().chain(std::iter::once(&total)) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String], note: &str| {
        let _ = write!(out, "{:<w$}", cells[0], w = widths[0]);
        for (cell, w) in cells[1..].iter().zip(&widths[1..]) {
            let _ = write!(out, "  {cell:>w$}");
        }
        if !note.is_empty() {
            let _ = write!(out, "  {note}");
        }
        out.push('\n');
    };
    line(&mut out, &header.map(str::to_owned), "NOTE");
    for (row, note) in rows.iter().zip(&notes) {
        line(&mut out, row, note);
    }
    line(
        &mut out,
        &total,
        &format!("discovery {:.2}s", discovery.as_secs_f64()),
    );
    out
}

/// The summary as one line of JSON (`--summary json`), for scripts: the
/// table's numbers under stable names.
///
/// `{"kinds":[{"kind","namespace","version","objects","pages","retries",
/// "restarts","seconds","acrossSnapshots","error"}],"total":{"kinds",
/// "complete","objects","pages","retries","restarts","seconds"},
/// "discoverySeconds","timedOut","errors":[...]}` (`namespace` and `error` are `null`
/// when absent).
pub(crate) fn summary_json(report: &LoadReport, discovery: Duration) -> String {
    let kinds: Vec<serde_json::Value> = report
        .kinds
        .iter()
        .map(|k| {
            serde_json::json!({
                "kind": k.kind.qualified_name(),
                "version": k.kind.version,
                "namespace": k.namespace,
                "objects": k.objects,
                "pages": k.pages,
                "retries": k.retries,
                "restarts": k.restarts,
                "seconds": k.elapsed.as_secs_f64(),
                "acrossSnapshots": k.across_snapshots,
                "error": k.error.as_ref().map(ToString::to_string),
            })
        })
        .collect();
    let value = serde_json::json!({
        "kinds": kinds,
        "total": {
            "kinds": report.kinds.len(),
            "complete": report.kinds.iter().filter(|k| k.is_complete()).count(),
            "objects": report.objects(),
            "pages": report.pages(),
            "retries": report.retries(),
            "restarts": report.restarts(),
            "seconds": report.elapsed.as_secs_f64(),
        },
        "discoverySeconds": discovery.as_secs_f64(),
        "timedOut": report.timed_out,
        "errors": report.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
    });
    let mut line = value.to_string();
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use leash_loader::{KindReport, ResolvedKind};

    use super::*;

    fn kind(plural: &str, group: &str) -> Arc<ResolvedKind> {
        Arc::new(ResolvedKind {
            group: group.into(),
            version: "v1".into(),
            kind: "K".into(),
            plural: plural.into(),
            singular: "k".into(),
            namespaced: true,
            verbs: vec!["list".into()],
            short_names: vec![],
        })
    }

    #[test]
    fn rows_notes_and_totals() {
        let report = LoadReport {
            kinds: vec![
                KindReport {
                    kind: kind("pods", ""),
                    namespace: Some("a".into()),
                    objects: 1200,
                    pages: 3,
                    retries: 2,
                    restarts: 0,
                    elapsed: Duration::from_millis(1500),
                    across_snapshots: true,
                    error: None,
                },
                KindReport {
                    kind: kind("widgets", "example.dev"),
                    namespace: None,
                    objects: 5,
                    pages: 1,
                    retries: 5,
                    restarts: 1,
                    elapsed: Duration::from_millis(20),
                    across_snapshots: false,
                    error: Some(leash_loader::Error::Cancelled),
                },
            ],
            elapsed: Duration::from_secs(2),
            ..LoadReport::default()
        };
        let json: serde_json::Value =
            serde_json::from_str(&summary_json(&report, Duration::from_millis(30))).unwrap();
        assert_eq!(json["total"]["objects"], 1205);
        assert_eq!(json["total"]["retries"], 7);
        assert_eq!(json["total"]["complete"], 1);
        assert_eq!(json["kinds"][0]["namespace"], "a");
        assert_eq!(json["kinds"][0]["acrossSnapshots"], true);
        assert_eq!(json["kinds"][1]["kind"], "widgets.example.dev");
        assert_eq!(json["kinds"][1]["error"], "cancelled before completion");
        assert_eq!(json["discoverySeconds"], 0.03);

        let text = summary(&report, Duration::from_millis(30));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("KIND") && lines[0].ends_with("NOTE"));
        assert!(
            lines[1].starts_with("pods -n a")
                && lines[1].contains("1200")
                && lines[1].contains("across snapshots")
        );
        assert!(
            lines[2].starts_with("widgets.example.dev")
                && lines[2].contains("INCOMPLETE: cancelled")
        );
        assert!(
            lines[3].starts_with("TOTAL (1/2 complete)")
                && lines[3].contains("1205")
                && lines[3].contains("discovery 0.03s")
        );
    }
}
