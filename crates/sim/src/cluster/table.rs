//! The simulated crowd's figures for a person.

use super::ClusterReport;

impl ClusterReport {
    /// The figures as a Markdown table, with the scenario above it.
    pub fn table(&self) -> String {
        let r = self;
        let c = &r.config;
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        let failed = |i: usize| c.failures.iter().any(|&(_, n)| n as usize == i);
        let total: Vec<u64> =
            (0..r.client_bytes.len()).filter(|&i| !failed(i)).map(|i| r.client_bytes[i] + r.peer_bytes[i]).collect();
        let (least, most) = (total.iter().min().copied().unwrap_or(0), total.iter().max().copied().unwrap_or(0));
        let failed: Vec<String> = c.failures.iter().map(|(r, n)| format!("node {n} at round {r}")).collect();
        let mut out = String::new();
        out += &format!(
            "{} nodes, {} clients, one {:.1} GiB object in {} groups of {:.1} MiB, {:.1} GiB kept per node\n",
            c.nodes,
            c.clients,
            gib(c.object_bytes),
            r.groups,
            c.placement.group_bytes as f64 / f64::from(1u32 << 20),
            gib(c.node_cache_bytes)
        );
        out += &format!("failures: {}\n", if failed.is_empty() { "none".to_owned() } else { failed.join(", ") });
        out += "| figure | value |\n|---|---|\n";
        out += &format!(
            "| downloads completed | {} of {} ({} resumed on another node) |\n",
            r.completed, c.clients, r.resumed
        );
        out += &format!("| origin bytes / object | {:.3} |\n", r.origin_per_object);
        out += &format!("| node bytes sent, max / mean | {:.3} |\n", r.max_over_mean);
        out += &format!("| peer bytes sent, max / mean | {:.3} |\n", r.peer_max_over_mean);
        out += &format!("| objects each node fetched from the others, mean | {:.2} |\n", r.peer_per_node);
        out += &format!(
            "| node bytes sent, least / most of the nodes that never failed (GiB) | {:.0} / {:.0} |\n",
            gib(least),
            gib(most)
        );
        out += &format!("| hot groups | {} of {} |\n", r.hot_groups, r.groups);
        out += &format!("| rounds | {} |\n", r.rounds);
        out
    }
}
