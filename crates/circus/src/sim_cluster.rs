//! `circus sim-cluster`: a flash crowd on a cluster of nodes, counted in
//! bytes by the placement code the servers would run.

use anyhow::{Context, bail};
use circus_cluster::PlacementConfig;
use circus_core::ByteSize;
use circus_sim::cluster::{ClusterSimConfig, run_cluster};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

#[derive(Debug, Args)]
pub struct SimClusterArgs {
    #[arg(long, default_value_t = 100)]
    nodes: u32,
    /// Plain downloads in the crowd, arriving over --arrival-rounds.
    #[arg(long, default_value_t = 100_000)]
    clients: u32,
    /// Size of the one object the crowd downloads.
    #[arg(long, default_value = "10GiB")]
    object: ByteSize,
    /// What each node keeps of groups it does not own (memory and the
    /// tier's store on disk), least recently used out.
    #[arg(long, default_value = "16GiB")]
    node_cache: ByteSize,
    /// Bytes per group: the unit of placement and of fetches between nodes.
    #[arg(long, default_value = "4MiB")]
    group: ByteSize,
    /// Most groups of one object a node owns, over the mean (bounded load).
    #[arg(long, default_value_t = 1.25)]
    load_factor: f64,
    /// Nodes besides the owner that serve a hot group.
    #[arg(long, default_value_t = 2)]
    hot_replicas: u32,
    /// Requests an owner serves for a group before it is hot.
    #[arg(long, default_value_t = 8)]
    hot_after: u32,
    /// Rounds over which the crowd arrives (a client takes 1, 2 or 4 groups a round).
    #[arg(long, default_value_t = 600)]
    arrival_rounds: u32,
    /// A node failure, ROUND:NODE; repeatable. Default: nodes 7, 42 and 77
    /// at rounds 300, 900 and 1500. `--fail none` for none.
    #[arg(long = "fail", value_name = "ROUND:NODE")]
    fail: Vec<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

impl SimClusterArgs {
    fn config(&self) -> anyhow::Result<ClusterSimConfig> {
        let defaults = ClusterSimConfig::default();
        let failures = match self.fail.as_slice() {
            [] => defaults.failures,
            [none] if none == "none" => Vec::new(),
            list => list.iter().map(|f| parse_failure(f)).collect::<anyhow::Result<_>>()?,
        };
        if self.load_factor.is_nan() || self.load_factor < 1.0 {
            bail!("--load-factor must be at least 1.0 (the mean), got {}", self.load_factor);
        }
        if self.group.0 == 0 {
            bail!("--group must be at least one byte");
        }
        Ok(ClusterSimConfig {
            nodes: self.nodes,
            clients: self.clients,
            object_bytes: self.object.0,
            node_cache_bytes: self.node_cache.0,
            placement: PlacementConfig {
                group_bytes: self.group.0,
                load_factor: self.load_factor,
                hot_replicas: self.hot_replicas,
            },
            arrival_rounds: self.arrival_rounds,
            hot_after: self.hot_after,
            failures,
        })
    }
}

fn parse_failure(s: &str) -> anyhow::Result<(u32, u32)> {
    let (round, node) = s.split_once(':').with_context(|| format!("--fail {s}: expected ROUND:NODE"))?;
    let round = round.parse().with_context(|| format!("--fail {s}: bad round"))?;
    let node = node.parse().with_context(|| format!("--fail {s}: bad node"))?;
    Ok((round, node))
}

pub fn main(args: SimClusterArgs) -> anyhow::Result<()> {
    let cfg = args.config()?;
    let bar = ProgressBar::new(u64::from(cfg.clients));
    bar.set_style(
        ProgressStyle::with_template("{spinner} round {msg}: [{bar:40}] {pos}/{len} downloads done ({elapsed})")
            .expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let report = run_cluster(&cfg, &mut |round, done| {
        if round % 16 == 0 {
            bar.set_message(round.to_string());
            bar.set_position(u64::from(done));
        }
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_failure;

    #[test]
    fn failures_are_round_colon_node_and_anything_else_is_refused() {
        assert_eq!(parse_failure("300:7").unwrap(), (300, 7));
        for bad in ["300", "300:", ":7", "x:7", "3:-1", "99999999999:1", "1:2:3"] {
            assert!(parse_failure(bad).is_err(), "{bad}");
        }
    }
}
