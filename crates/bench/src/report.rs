//! Results: one row per server or policy, printed as JSON or a table.

use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    /// What was measured and how, in one sentence.
    pub setup: String,
    pub rows: Vec<Row>,
    /// The scenario's headline figure against its target, in words.
    pub verdict: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub server: String,
    /// Named figures, in display order.
    pub figures: Vec<(String, f64)>,
}

impl Row {
    pub fn new(server: impl Into<String>) -> Self {
        Row { server: server.into(), figures: Vec::new() }
    }

    pub fn with(mut self, name: &str, value: f64) -> Self {
        self.figures.push((name.to_owned(), value));
        self
    }

    pub fn get(&self, name: &str) -> Option<f64> {
        self.figures.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

impl Report {
    pub fn table(&self) -> String {
        let mut out = format!("{}: {}\n", self.scenario, self.setup);
        for row in &self.rows {
            let _ = write!(out, "  {:<22}", row.server);
            for (name, v) in &row.figures {
                let shown = if v.abs() >= 1e5 { format!("{v:.3e}") } else { format!("{v:.3}") };
                let _ = write!(out, "  {name} {shown}");
            }
            out.push('\n');
        }
        let _ = writeln!(out, "  => {}", self.verdict);
        out
    }
}
