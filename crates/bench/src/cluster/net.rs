//! The cluster's network: one namespace per node, each joined to a bridge
//! in the root namespace by a veth pair whose two ends are shaped by HTB to
//! the node's link rate (what the node sends, and what it receives), so the
//! cluster's aggregate is the sum of its links, not one loopback. The
//! origin, the front (HAProxy) and the clients live in the root namespace,
//! on the bridge's address and on loopback.
//!
//! The command lists are built by pure functions ([`ClusterNet`]) so they
//! can be unit-tested; [`NetUp`] runs them and removes everything it
//! made when dropped (namespaces left by a killed run are removed by the
//! next one).

use crate::{BenchError, netem::run_batch};
use std::{
    net::Ipv4Addr,
    process::{Command, Stdio},
};

/// Prefix of everything this module creates.
const PREFIX: &str = "cbk";

/// A link's queue, in seconds of its rate (at least four 64 KiB segments).
const QUEUE_SECONDS: f64 = 0.02;

#[derive(Debug, Clone, PartialEq)]
pub struct ClusterNet {
    /// Unique per run (the bench's pid).
    pub id: u32,
    /// Second octet of the 10.x.0.0/16 subnet.
    pub subnet: u8,
    pub nodes: usize,
    /// Each node's link, both ways, in bits per second.
    pub link_bps: f64,
    /// The nodes' TCP congestion control, if not the machine's default.
    pub congestion_control: Option<String>,
}

impl ClusterNet {
    pub fn namespace(&self, node: usize) -> String {
        format!("{PREFIX}{}n{node}", self.id)
    }

    fn bridge(&self) -> String {
        format!("{PREFIX}{}br", self.id)
    }

    /// The veth end in the root namespace (on the bridge) and the node's.
    pub fn veths(&self, node: usize) -> (String, String) {
        (format!("{PREFIX}{}r{node}", self.id), format!("{PREFIX}{}v{node}", self.id))
    }

    /// The bridge's address: the origin listens here.
    pub fn root_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet, 0, 254)
    }

    pub fn node_ip(&self, node: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet, 0, 1 + node as u8)
    }

    /// `ip -batch` lines for the root namespace.
    pub fn ip_batch(&self) -> String {
        let br = self.bridge();
        let mut out = format!("link add {br} type bridge\naddr add {}/16 dev {br}\nlink set {br} up\n", self.root_ip());
        for n in 0..self.nodes {
            let (r, v) = self.veths(n);
            let ns = self.namespace(n);
            out.push_str(&format!(
                "netns add {ns}\nlink add {r} type veth peer name {v}\nlink set {v} netns {ns}\nlink set {r} master {br}\nlink set {r} up\n"
            ));
        }
        out
    }

    /// `ip -n NAMESPACE -batch` lines for node `n`.
    pub fn ns_ip_batch(&self, n: usize) -> String {
        let (_, v) = self.veths(n);
        format!("addr add {}/16 dev {v}\nlink set {v} up\nlink set lo up\n", self.node_ip(n))
    }

    /// `tc -batch` lines shaping `dev` to the link rate, behind it a queue
    /// of [`QUEUE_SECONDS`] of the link's bytes. HTB's own leaf queue is a
    /// 1,000-packet FIFO, which with 64 KiB segmentation offload holds
    /// seconds of a saturated link: every new connection (a health check,
    /// a block asked of a member) then waits behind seconds of other flows'
    /// bytes and starts slowly over that round trip, where a host with
    /// fq_codel (systemd's default qdisc; not built on this kernel) keeps
    /// the queue to milliseconds.
    pub fn tc_batch(&self, dev: &str) -> String {
        let rate = self.link_bps.round() as u64;
        let queue = ((self.link_bps / 8.0 * QUEUE_SECONDS) as u64).max(4 * 65_536);
        format!(
            "qdisc add dev {dev} root handle 1: htb default 1\n\
             class add dev {dev} parent 1: classid 1:1 htb rate {rate}bit ceil {rate}bit\n\
             qdisc add dev {dev} parent 1:1 handle 10: bfifo limit {queue}\n"
        )
    }

    /// A command prefix that runs a program in node `n`'s namespace.
    pub fn exec_in(&self, n: usize) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.namespace(n)]
    }
}

/// The network of one run; removed when dropped.
#[derive(Debug)]
pub struct NetUp {
    pub plan: ClusterNet,
}

impl NetUp {
    pub fn up(plan: ClusterNet) -> Result<NetUp, BenchError> {
        remove_stale();
        // From here on, drop removes whatever part was built.
        let net = NetUp { plan };
        run_batch(&["ip", "-batch", "-"], &net.plan.ip_batch())?;
        for n in 0..net.plan.nodes {
            let ns = net.plan.namespace(n);
            run_batch(&["ip", "-n", &ns, "-batch", "-"], &net.plan.ns_ip_batch(n))?;
            let (r, v) = net.plan.veths(n);
            run_batch(&["tc", "-n", &ns, "-batch", "-"], &net.plan.tc_batch(&v))?;
            run_batch(&["tc", "-batch", "-"], &net.plan.tc_batch(&r))?;
            if let Some(cc) = &net.plan.congestion_control {
                let set = format!("net.ipv4.tcp_congestion_control={cc}");
                run_batch(&["ip", "netns", "exec", &ns, "sysctl", "-qw", &set], "")?;
            }
        }
        Ok(net)
    }

    /// Bytes node `n` has sent so far (what its root-side veth received).
    pub fn sent_by(&self, n: usize) -> u64 {
        let (r, _) = self.plan.veths(n);
        std::fs::read_to_string(format!("/sys/class/net/{r}/statistics/rx_bytes"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for NetUp {
    fn drop(&mut self) {
        for n in 0..self.plan.nodes {
            let _ = Command::new("ip").args(["netns", "del", &self.plan.namespace(n)]).stderr(Stdio::null()).status();
            let (r, _) = self.plan.veths(n);
            let _ = Command::new("ip").args(["link", "del", &r]).stderr(Stdio::null()).status();
        }
        let _ = Command::new("ip").args(["link", "del", &self.plan.bridge()]).stderr(Stdio::null()).status();
    }
}

/// Removes the namespaces and bridges of earlier runs whose process is gone.
fn remove_stale() {
    let dead = |rest: &str| {
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        pid.parse::<u32>().is_ok_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for name in String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_whitespace().next()) {
            if name.strip_prefix(PREFIX).is_some_and(dead) {
                let _ = Command::new("ip").args(["netns", "del", name]).status();
            }
        }
    }
    if let Ok(out) = Command::new("ip").args(["-o", "link", "show"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(name) = line.split(':').nth(1).map(|n| n.trim().split('@').next().unwrap_or("")) else { continue };
            if name.strip_prefix(PREFIX).is_some_and(dead) {
                let _ = Command::new("ip").args(["link", "del", name]).stderr(Stdio::null()).status();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_has_its_namespace_its_address_and_a_shaped_link_both_ways() {
        let plan = ClusterNet { id: 42, subnet: 150, nodes: 2, link_bps: 100e6, congestion_control: None };
        let ip = plan.ip_batch();
        assert!(ip.starts_with("link add cbk42br type bridge\naddr add 10.150.0.254/16 dev cbk42br\n"), "{ip}");
        for n in 0..2 {
            assert!(ip.contains(&format!("netns add cbk42n{n}\nlink add cbk42r{n} type veth peer name cbk42v{n}\n")));
            assert!(ip.contains(&format!("link set cbk42r{n} master cbk42br\n")));
        }
        assert_eq!(plan.ns_ip_batch(1), "addr add 10.150.0.2/16 dev cbk42v1\nlink set cbk42v1 up\nlink set lo up\n");
        let tc = plan.tc_batch("cbk42v1");
        assert!(tc.contains("htb rate 100000000bit ceil 100000000bit"), "{tc}");
        assert!(tc.ends_with("qdisc add dev cbk42v1 parent 1:1 handle 10: bfifo limit 262144\n"), "{tc}");
        // Interface names fit the kernel's 15 characters for any pid.
        let big = ClusterNet { id: 4_194_304, ..plan };
        assert!(big.veths(9).0.len() <= 15 && big.namespace(9).len() <= 15);
    }
}
