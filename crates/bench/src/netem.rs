//! Link emulation in the kernel: a network namespace for the servers, a
//! veth pair to the root namespace where the clients live, one address per
//! emulated client, and HTB on the server's side of the veth: a parent
//! class at the server link capacity and one child class per client
//! address at that client's link rate (u32 filter on the destination).
//!
//! netem is not built on these kernels (docs: /work/shared/research/env.md),
//! so random loss is an iptables `statistic` rule on the receiving (client)
//! side, and added delay or per-message overhead NFQUEUE rules feeding the
//! Rust line of [`crate::delay`]. With loss, with the line (unless it takes
//! super-packets) and with links under 1 Mbit/s, segmentation offloads are
//! switched off on both veth ends so that a dropped, delayed or
//! rate-limited packet is one MTU-sized segment, not a 64 KiB super-packet. The servers' congestion
//! control is pinned to reno in their namespace (the machine default is
//! BBR; the paper's FreeBSD 4.5 ran NewReno, and a namespace may only pick
//! from `tcp_allowed_congestion_control`, which holds reno and bbr here). Everything is created with names unique to the run and removed on
//! drop; namespaces left by a killed run are removed by the next one.
//!
//! The command lists are built by pure functions ([`NetPlan`]) so they can be
//! unit-tested; [`Network::up`] runs them with `ip -batch` and `tc -batch`.

use crate::{BenchError, delay::LineSpec, io_err};
use std::{
    net::Ipv4Addr,
    process::{Command, Stdio},
};

/// Prefix of everything this module creates (namespaces, interfaces).
const PREFIX: &str = "cbn";

/// What to build: rates in bits per second.
#[derive(Debug, Clone, PartialEq)]
pub struct NetPlan {
    /// Unique per run, e.g. the bench's pid.
    pub id: u32,
    /// Second octet of the 10.x.0.0/16 subnet used.
    pub subnet: u8,
    pub server_link_bps: f64,
    /// One pool of client addresses per link class, `per_class` each.
    pub class_bps: Vec<f64>,
    pub per_class: usize,
    /// Random loss probability on the server-to-client path.
    pub loss: f64,
    /// The NFQUEUE line every client packet passes (delay added to the
    /// server-to-client path, overhead per request), if any.
    pub line: Option<LineSpec>,
}

impl NetPlan {
    pub fn namespace(&self) -> String {
        format!("{PREFIX}{}", self.id)
    }

    /// Server end (inside the namespace) and client end (root namespace).
    pub fn veths(&self) -> (String, String) {
        (format!("{PREFIX}{}s", self.id), format!("{PREFIX}{}c", self.id))
    }

    pub fn server_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet, 0, 1)
    }

    /// Address `i` of class `class`'s pool.
    pub fn client_ip(&self, class: usize, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet, 1 + class as u8, 1 + i as u8)
    }

    /// An address with no client class (warm-up, metrics): only the server link limits it.
    pub fn control_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet, 250, 1)
    }

    fn clients(&self) -> impl Iterator<Item = (usize, Ipv4Addr, f64)> + '_ {
        self.class_bps
            .iter()
            .enumerate()
            .flat_map(move |(c, &bps)| (0..self.per_class).map(move |i| (c, self.client_ip(c, i), bps)))
            .enumerate()
            .map(|(n, (_, ip, bps))| (n, ip, bps))
    }

    /// `ip -batch` lines run in the root namespace.
    pub fn ip_batch(&self) -> String {
        let ns = self.namespace();
        let (vs, vc) = self.veths();
        let mut out = format!(
            "netns add {ns}\nlink add {vc} type veth peer name {vs}\nlink set {vs} netns {ns}\naddr add {}/16 dev {vc}\n",
            self.control_ip(),
        );
        for (_, ip, _) in self.clients() {
            out.push_str(&format!("addr add {ip}/16 dev {vc}\n"));
        }
        out.push_str(&format!("link set {vc} up\n"));
        out
    }

    /// `ip -n NAMESPACE -batch` lines: the server's end.
    pub fn ns_ip_batch(&self) -> String {
        let (vs, _) = self.veths();
        format!("addr add {}/16 dev {vs}\nlink set {vs} up\nlink set lo up\n", self.server_ip())
    }

    /// `tc -batch` lines run inside the server namespace.
    pub fn tc_batch(&self) -> String {
        let (vs, _) = self.veths();
        let link = self.server_link_bps.round() as u64;
        let mut out = format!(
            "qdisc add dev {vs} root handle 1: htb default 2\n\
             class add dev {vs} parent 1: classid 1:1 htb rate {link}bit ceil {link}bit\n\
             class add dev {vs} parent 1:1 classid 1:2 htb rate 1mbit ceil {link}bit\n"
        );
        // A class sends at its own rate whatever its parent's, so clients
        // whose links add up past the server's are each assured their share
        // of it, and borrow up to their own link's rate.
        let all: f64 = self.clients().map(|(_, _, bps)| bps).sum();
        let share = (self.server_link_bps / all).min(1.0);
        for (n, ip, bps) in self.clients() {
            let class = format!("1:{:x}", 0x10 + n);
            let rate = (bps * share).round() as u64;
            let bps = bps.round() as u64;
            out.push_str(&format!(
                "class add dev {vs} parent 1:1 classid {class} htb rate {rate}bit ceil {bps}bit\n\
                 filter add dev {vs} parent 1: protocol ip prio 1 u32 match ip dst {ip}/32 flowid {class}\n"
            ));
            if let Some(limit) = slow_link_queue(bps as f64) {
                out.push_str(&format!(
                    "qdisc add dev {vs} parent {class} handle {:x}: pfifo limit {limit}\n",
                    0x100 + n
                ));
            }
        }
        out
    }

    /// Whether segmentation offloads must be off: with loss or delay (a
    /// drop or delay hits one MTU, not a 64 KiB super-packet), and on links
    /// under 1 Mbit/s, where HTB would let one 64 KiB super-packet through
    /// at once and then hold the class for its whole length (18 s at
    /// 28.8 kbit/s), so a small object would arrive in one burst.
    pub fn small_segments(&self) -> bool {
        self.loss > 0.0 || self.line.is_some_and(|l| !l.super_packets) || self.class_bps.iter().any(|&b| b < 1e6)
    }

    /// The NFQUEUE number of the delay line.
    pub fn queue(&self) -> u16 {
        1000 + (self.id % 60_000) as u16
    }

    /// iptables rules (table, chain, match and target) on the clients' side.
    pub fn iptables_rules(&self) -> Vec<Vec<String>> {
        let (_, vc) = self.veths();
        // The control address (warm-up downloads, metrics) is exempt: a
        // 32 MiB warm-up at 10% loss and 75 ms would take minutes.
        let control = self.control_ip().to_string();
        let tag = ["!", "-d", &control, "-m", "comment", "--comment", &self.namespace()].map(String::from);
        let mut rules = Vec::new();
        if self.line.is_some() {
            // From the server (delayed), and to it (overhead per request).
            let from: Vec<String> =
                ["-t", "mangle", "PREROUTING", "-i", &vc, "!", "-d", &control].map(String::from).into();
            let to: Vec<String> = ["-t", "mangle", "OUTPUT", "-o", &vc, "!", "-s", &control].map(String::from).into();
            for mut r in [from, to] {
                r.extend(tag[3..].iter().cloned());
                r.extend(
                    ["-j", "NFQUEUE", "--queue-num", &self.queue().to_string(), "--queue-bypass"].map(String::from),
                );
                rules.push(r);
            }
        }
        if self.loss > 0.0 {
            let mut r: Vec<String> = ["-t", "filter", "INPUT", "-i", &vc].map(String::from).to_vec();
            r.extend(tag.iter().cloned());
            r.extend(
                ["-m", "statistic", "--mode", "random", "--probability", &self.loss.to_string(), "-j", "DROP"]
                    .map(String::from),
            );
            rules.push(r);
        }
        rules
    }

    /// `iptables -w -t TABLE {-A|-D} CHAIN ...` for one rule.
    pub fn iptables_argv(rule: &[String], add: bool) -> Vec<String> {
        let mut argv = vec!["iptables".to_string(), "-w".into(), rule[0].clone(), rule[1].clone()];
        argv.push(if add { "-A" } else { "-D" }.into());
        argv.extend(rule[2..].iter().cloned());
        argv
    }

    /// Argument vectors that wrap a command to run inside the server namespace.
    pub fn exec_in(&self) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.namespace()]
    }
}

/// The queue, in packets, of a link under 1 Mbit/s: about 2 s of its rate,
/// at least 5 packets, as a modem's buffer. HTB's default leaf queue holds
/// 1,000 packets, which at 28.8 kbit/s is 7 minutes: TCP's window grew into
/// it, its timers fired spuriously, and the copies they sent queued ahead
/// of later responses (a keep-alive connection fell minutes behind).
fn slow_link_queue(bps: f64) -> Option<u64> {
    (bps < 1e6).then(|| ((bps / 8.0 * 2.0 / 1500.0).ceil() as u64).max(5))
}

/// The emulated network of one run; removed when dropped.
#[derive(Debug)]
pub struct Network {
    pub plan: NetPlan,
    rules: Vec<Vec<String>>,
    line: Option<crate::delay::DelayLine>,
}

impl Network {
    /// Builds the namespace, veth, addresses and HTB classes of `plan`.
    pub fn up(plan: NetPlan) -> Result<Network, BenchError> {
        remove_stale();
        // From here on, drop removes whatever part was built.
        let mut net = Network { plan, rules: Vec::new(), line: None };
        run_batch(&["ip", "-batch", "-"], &net.plan.ip_batch())?;
        run_batch(&["ip", "-n", &net.plan.namespace(), "-batch", "-"], &net.plan.ns_ip_batch())?;
        let mut tc = net.plan.exec_in();
        tc.extend(["tc".into(), "-batch".into(), "-".into()]);
        let tc: Vec<&str> = tc.iter().map(String::as_str).collect();
        run_batch(&tc, &net.plan.tc_batch())?;
        let mut cc = net.plan.exec_in();
        cc.extend(["sysctl".into(), "-qw".into(), "net.ipv4.tcp_congestion_control=reno".into()]);
        run(&cc)?;
        if net.plan.small_segments() {
            let (vs, vc) = net.plan.veths();
            let off = ["tso", "off", "gso", "off", "gro", "off"].map(String::from);
            let mut a = net.plan.exec_in();
            a.extend(["ethtool".into(), "-K".into(), vs]);
            a.extend(off.iter().cloned());
            run(&a)?;
            let mut b = vec!["ethtool".to_string(), "-K".into(), vc];
            b.extend(off.iter().cloned());
            run(&b)?;
        }
        if let Some(spec) = net.plan.line {
            net.line = Some(crate::delay::DelayLine::start(net.plan.queue(), spec)?);
        }
        for rule in net.plan.iptables_rules() {
            run(&NetPlan::iptables_argv(&rule, true))?;
            net.rules.push(rule);
        }
        Ok(net)
    }

    /// A second octet for 10.x.0.0/16 that no route on this machine uses.
    pub fn free_subnet(seed: u32) -> Result<u8, BenchError> {
        let routes = String::from_utf8_lossy(
            &Command::new("ip")
                .args(["-4", "route", "show", "table", "all"])
                .output()
                .map_err(io_err("ip route"))?
                .stdout,
        )
        .into_owned();
        (0..100u32)
            .map(|i| (100 + (seed + i) % 100) as u8)
            .find(|x| !routes.contains(&format!("10.{x}.")))
            .ok_or_else(|| BenchError::Setup("no free 10.x.0.0/16 subnet for the emulated links".into()))
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for rule in self.rules.drain(..) {
            let argv = NetPlan::iptables_argv(&rule, false);
            let _ = Command::new(&argv[0]).args(&argv[1..]).status();
        }
        self.line.take();
        let _ = Command::new("ip").args(["netns", "del", &self.plan.namespace()]).stderr(Stdio::null()).status();
        let (_, vc) = self.plan.veths();
        let _ = Command::new("ip").args(["link", "del", &vc]).stderr(Stdio::null()).status();
    }
}

/// The address servers listen on: the namespace's with emulated links,
/// loopback without.
pub fn server_host(net: Option<&Network>) -> String {
    net.map_or("127.0.0.1".into(), |n| n.plan.server_ip().to_string())
}

/// The command prefix that starts a server where its clients reach it:
/// inside the namespace with emulated links, nothing without.
pub fn server_wrap(net: Option<&Network>) -> Vec<String> {
    net.map_or(Vec::new(), |n| n.plan.exec_in())
}

/// Whether this process can build namespaces (root).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

/// Removes namespaces and iptables rules of earlier runs whose process is gone.
fn remove_stale() {
    let dead = |name: &str| {
        name.strip_prefix(PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    for table in ["mangle", "filter"] {
        let Ok(out) = Command::new("iptables").args(["-w", "-t", table, "-S"]).output() else { continue };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let tagged = words.windows(2).any(|w| w[0] == "--comment" && dead(w[1].trim_matches('"')));
            if tagged && words.first() == Some(&"-A") {
                let _ = Command::new("iptables").args(["-w", "-t", table, "-D"]).args(&words[1..]).status();
            }
        }
    }
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for name in String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
            let _ = Command::new("ip").args(["link", "del", &format!("{PREFIX}{pid}c")]).stderr(Stdio::null()).status();
        }
    }
}

fn run(argv: &[String]) -> Result<(), BenchError> {
    let out = Command::new(&argv[0]).args(&argv[1..]).output().map_err(io_err(format!("running {}", argv[0])))?;
    if !out.status.success() {
        return Err(BenchError::Setup(format!(
            "{} failed: {} (needs root and iproute2)",
            argv.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Runs `argv` with `input` on its standard input (an `ip -batch` or
/// `tc -batch` list); its error output becomes the error.
pub(crate) fn run_batch(argv: &[&str], input: &str) -> Result<(), BenchError> {
    use std::io::Write;
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io_err(format!("running {}", argv[0])))?;
    child.stdin.take().expect("piped").write_all(input.as_bytes()).map_err(io_err("writing batch"))?;
    let out = child.wait_with_output().map_err(io_err(format!("running {}", argv[0])))?;
    if !out.status.success() {
        return Err(BenchError::Setup(format!(
            "{} failed: {} (needs root, iproute2 and the htb qdisc)",
            argv.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> NetPlan {
        NetPlan {
            id: 42,
            subnet: 150,
            server_link_bps: 1e9,
            class_bps: vec![10e6, 44.736e6],
            per_class: 2,
            loss: 0.0,
            line: None,
        }
    }

    #[test]
    fn names_fit_interface_limits() {
        let p = NetPlan { id: 4_194_304, ..plan() };
        let (vs, vc) = p.veths();
        assert!(vs.len() <= 15 && vc.len() <= 15, "{vs} {vc}");
        assert_ne!(vs, vc);
    }

    #[test]
    fn ip_batch_gives_every_client_an_address() {
        let b = plan().ip_batch();
        for ip in ["10.150.1.1", "10.150.1.2", "10.150.2.1", "10.150.2.2", "10.150.250.1"] {
            assert!(b.contains(&format!("addr add {ip}/16 dev cbn42c")), "{ip} missing:\n{b}");
        }
        assert!(plan().ns_ip_batch().contains("addr add 10.150.0.1/16 dev cbn42s"));
        assert!(b.starts_with("netns add cbn42\n"));
    }

    #[test]
    fn tc_batch_has_a_rate_class_and_filter_per_client() {
        let b = plan().tc_batch();
        let cases = [
            ("server link parent", "classid 1:1 htb rate 1000000000bit ceil 1000000000bit"),
            ("first 10T client", "classid 1:10 htb rate 10000000bit ceil 10000000bit"),
            ("last T3 client", "classid 1:13 htb rate 44736000bit ceil 44736000bit"),
            ("filter by destination", "u32 match ip dst 10.150.2.2/32 flowid 1:13"),
        ];
        for (name, want) in cases {
            assert!(b.contains(want), "{name}: {want:?} missing in\n{b}");
        }
        assert_eq!(b.matches("filter add").count(), 4);
        assert!(!b.contains("pfifo"), "fast links keep HTB's default queue:\n{b}");
    }

    /// A child class sends at its own rate whatever its parent's: eight
    /// clients each assured the whole link passed eight links' worth (the
    /// 100 Mbit/s signature point carried twice its rate).
    #[test]
    fn clients_whose_links_add_up_past_the_servers_are_assured_their_share_of_it() {
        let b = NetPlan { server_link_bps: 100e6, class_bps: vec![100e6], per_class: 8, ..plan() }.tc_batch();
        assert!(b.contains("classid 1:10 htb rate 12500000bit ceil 100000000bit"), "{b}");
        assert!(b.contains("classid 1:17 htb rate 12500000bit ceil 100000000bit"), "{b}");
    }

    #[test]
    fn modem_links_get_a_short_queue() {
        let b = NetPlan { class_bps: vec![28_800.0], per_class: 2, ..plan() }.tc_batch();
        assert!(b.contains("qdisc add dev cbn42s parent 1:10 handle 100: pfifo limit 5"), "{b}");
        assert!(b.contains("qdisc add dev cbn42s parent 1:11 handle 101: pfifo limit 5"), "{b}");
        assert_eq!(slow_link_queue(512_000.0), Some(86));
    }

    #[test]
    fn loss_and_delay_rules_sit_on_the_client_side_and_are_removable() {
        assert!(plan().iptables_rules().is_empty(), "no rules without loss or delay");
        let line = LineSpec { delay: std::time::Duration::from_millis(75), ..LineSpec::default() };
        let p = NetPlan { loss: 0.1, line: Some(line), ..plan() };
        let rules = p.iptables_rules();
        let add: Vec<String> = rules.iter().map(|r| NetPlan::iptables_argv(r, true).join(" ")).collect();
        assert_eq!(
            add[0],
            "iptables -w -t mangle -A PREROUTING -i cbn42c ! -d 10.150.250.1 -m comment --comment cbn42 -j NFQUEUE --queue-num 1042 --queue-bypass"
        );
        assert_eq!(
            add[1],
            "iptables -w -t mangle -A OUTPUT -o cbn42c ! -s 10.150.250.1 -m comment --comment cbn42 -j NFQUEUE --queue-num 1042 --queue-bypass"
        );
        assert_eq!(
            add[2],
            "iptables -w -t filter -A INPUT -i cbn42c ! -d 10.150.250.1 -m comment --comment cbn42 -m statistic --mode random --probability 0.1 -j DROP"
        );
        let del = NetPlan::iptables_argv(&rules[2], false).join(" ");
        assert_eq!(del, add[2].replace(" -A ", " -D "));
        assert!(p.small_segments(), "one MTU per delayed or dropped packet");
        let whole = NetPlan { line: Some(LineSpec { super_packets: true, ..line }), ..plan() };
        assert!(!whole.small_segments(), "a line taking super-packets keeps the offloads");
    }
}
