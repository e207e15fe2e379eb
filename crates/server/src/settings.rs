//! Every setting of `circus serve`, defined once: the same name as a flag
//! (`--drain-timeout`) and as a key of the TOML file (`drain_timeout`),
//! sizes and durations with their units. Applying a [`Settings`] overlays
//! only what it sets, so the binary applies the file, then the flags.

use crate::{
    config::{ConfigError, ServeConfig},
    listen::{Listen, Switch},
};
use circus_core::{ByteSize, Span};
use circus_origin::{DnsMembers, MemberSource, OriginConfig, OriginSource, PeerConfig, PeerKey, S3Config};
use circus_sched::{Favor, PolicyKind};
use serde::Deserialize;
use std::{path::PathBuf, sync::Arc, time::Duration};

/// Settings as the command line and the TOML file give them: every one
/// optional, unknown keys rejected.
// The fields' docs are `--help` text, written for a terminal: brackets and
// URLs there are not rustdoc links.
#[allow(rustdoc::broken_intra_doc_links, rustdoc::bare_urls)]
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Directory whose files are served (omit it with --origin).
    #[arg(value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Address to listen on: host:port, :port (every interface),
    /// [v6]:port; repeat for several (default 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<Vec<Listen>>,
    /// Address of the admin listener (/metrics, /status, POST /purge, POST
    /// /prefetch), or off; it has no authentication of its own, so keep it
    /// on loopback (default 127.0.0.1:9180).
    #[arg(long, value_name = "ADDR|off")]
    pub admin_listen: Option<Switch>,
    /// Certificate chain (PEM) to serve HTTPS with; repeat for several
    /// names (chosen by SNI; the first is the default).
    #[arg(long, value_name = "PEM")]
    pub tls_cert: Option<Vec<PathBuf>>,
    /// Private key (PEM) of the --tls-cert at the same place.
    #[arg(long, value_name = "PEM")]
    pub tls_key: Option<Vec<PathBuf>>,
    /// Domain names to get a certificate for from an ACME CA (Let's
    /// Encrypt unless --acme-directory says otherwise), kept and renewed by
    /// itself; the listener speaks HTTPS and must be reachable on port 443
    /// under these names (TLS-ALPN-01 validation).
    #[arg(long, value_name = "DOMAIN")]
    pub acme: Option<Vec<String>>,
    /// The ACME CA's directory URL (default
    /// https://acme-v02.api.letsencrypt.org/directory).
    #[arg(long, value_name = "URL")]
    pub acme_directory: Option<String>,
    /// Where the ACME account and certificates are kept; when not given,
    /// $STATE_DIRECTORY/acme under systemd, ~/.local/state/circus/acme
    /// otherwise.
    #[arg(long, value_name = "DIR")]
    pub acme_state: Option<PathBuf>,
    /// Contact address for the ACME account (the CA's expiry warnings go
    /// there).
    #[arg(long, value_name = "EMAIL")]
    pub acme_email: Option<String>,
    /// Root certificate (PEM) to trust for the ACME directory instead of
    /// the system roots (a test CA such as Pebble).
    #[arg(long, value_name = "PEM")]
    pub acme_ca: Option<PathBuf>,
    /// With HTTPS: a cleartext listener (e.g. :80) that answers every
    /// request with a redirect to the same URL over https (default off).
    #[arg(long, value_name = "ADDR|off")]
    pub redirect_listen: Option<Switch>,
    /// Memory for cached blocks: a hard budget (default 256MiB).
    #[arg(long, value_name = "SIZE")]
    pub cache: Option<ByteSize>,
    /// circus (reorder blocks to share reads) or sequential (default circus).
    #[arg(long)]
    pub policy: Option<PolicyKind>,
    /// Block size, the unit of reads and sends (default 64KiB).
    #[arg(long, value_name = "SIZE")]
    pub block: Option<ByteSize>,
    /// Blocks queued per native client (default 5).
    #[arg(long, value_name = "BLOCKS")]
    pub queue: Option<u32>,
    /// Active region length per file (default 16MiB).
    #[arg(long, value_name = "SIZE")]
    pub active: Option<ByteSize>,
    /// Leapfront distance as a multiple of the active region's length
    /// (default 1.0, at least 1.0; docs/scheduler.md).
    #[arg(long, value_name = "FRACTION")]
    pub leapfront: Option<f64>,
    /// Fraction of its file a native client must hold before it may read
    /// outside the active region on its own (default 0.75; docs/scheduler.md).
    #[arg(long, value_name = "FRACTION")]
    pub threshold: Option<f64>,
    /// Blocks fetched per storage read, counting the demanded one (default
    /// 1: exactly what a client asked for; more read ahead sequentially).
    #[arg(long, value_name = "BLOCKS")]
    pub readahead: Option<u32>,
    /// What the circus policy favours when a file's native clients differ in
    /// speed: speed (default: each at its own pace; blocks a slower client
    /// missed are read again) or storage (each block read once for all of
    /// them, native and plain HTTP; the slowest sets the pace, so faster
    /// clients slow down).
    #[arg(long)]
    pub favor: Option<Favor>,
    /// Connections served at once; more are answered 503 (default 10000).
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Connections one client address may hold at once (default 0: no cap;
    /// behind a NAT many users share one address).
    #[arg(long, value_name = "N")]
    pub max_connections_per_ip: Option<usize>,
    /// Streams one HTTP/2 connection may have open at once (default 100).
    #[arg(long, value_name = "N")]
    pub max_streams: Option<u32>,
    /// Largest request head accepted (default 24KiB: room for the longest
    /// resume request).
    #[arg(long, value_name = "SIZE")]
    pub max_header: Option<ByteSize>,
    /// Time a connection may take to send its request head (default 30s).
    #[arg(long, value_name = "TIME")]
    pub header_timeout: Option<Span>,
    /// Time a response may make no progress (the client takes no byte)
    /// before its connection is closed; idle HTTP/2 connections are closed
    /// after it too (default 60s).
    #[arg(long, value_name = "TIME")]
    pub send_timeout: Option<Span>,
    /// Time SIGTERM waits for downloads in progress (default 30s).
    #[arg(long, value_name = "TIME")]
    pub drain_timeout: Option<Span>,
    /// Storage reads in flight at once (default 16).
    #[arg(long, value_name = "N")]
    pub io_threads: Option<usize>,
    /// Unsent bytes per cleartext connection kept in the kernel (default
    /// 128KiB; 0 = system default), raised to one bandwidth-delay product
    /// of the connection (up to 4 MiB) so that a long round trip does not
    /// leave the window waiting for the server. Small values let the
    /// scheduler see clients' real pace. HTTPS connections keep the system
    /// default.
    #[arg(long, value_name = "SIZE")]
    pub send_lowat: Option<ByteSize>,
    /// The same while a cleartext HTTP/1.x response sends a file larger
    /// than the cache (default 16KiB; 0 = system default), raised to 100 ms
    /// of the connection's delivery rate (up to 4 MiB): there the
    /// scheduler's view of each reader's position decides which blocks
    /// stay for the readers behind, and a link left idle puts its reader
    /// behind the others.
    #[arg(long, value_name = "SIZE")]
    pub send_lowat_uncached: Option<ByteSize>,
    /// Send cached blocks with sendfile(2) from a memfd instead of copying
    /// them into each socket (default true).
    #[arg(long, value_name = "BOOL")]
    pub zero_copy: Option<bool>,
    /// Keep the zero-copy cache in an unlinked file in DIR instead of the
    /// default (a file on a tmpfs of huge pages mounted where only circus
    /// sees it, or a memfd where user namespaces are forbidden); on a
    /// tmpfs mounted with huge=always sends walk huge pages, not 4 KiB ones.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Keep hash indexes in DIR instead of DIR/.circus/index beside the data
    /// (for a read-only tree; `circus index` builds them ahead).
    #[arg(long, value_name = "DIR")]
    pub index_dir: Option<PathBuf>,
    /// Time a native request waits for its file's hash index to be built
    /// before it is served the plain stream instead (default 2s; the build
    /// goes on, and later requests are native).
    #[arg(long, value_name = "TIME")]
    pub index_wait: Option<Span>,
    /// Cap on storage reads, bytes per second (e.g. 50MiB; default 0: none).
    /// Downloads wait rather than read faster.
    #[arg(long, value_name = "SIZE")]
    pub read_rate: Option<ByteSize>,
    /// Serve files and directories whose names start with a dot (.git/,
    /// .env); by default they are answered 404.
    #[arg(long, value_name = "BOOL")]
    pub dotfiles: Option<bool>,
    /// Answer a directory without an index.html with a listing of its
    /// files (default true; false answers 403).
    #[arg(long, value_name = "BOOL")]
    pub listing: Option<bool>,
    /// A line per request (time, peer, request, status, bytes, duration,
    /// native or plain, TLS, cache hit or miss): off, stderr or a file,
    /// reopened on SIGUSR1 for logrotate (default off).
    #[arg(long, value_name = "off|stderr|FILE")]
    pub access_log: Option<crate::access_log::Target>,
    /// combined (what log tools read, circus's fields after it) or json
    /// (default combined).
    #[arg(long, value_name = "FORMAT")]
    pub access_log_format: Option<crate::access_log::Format>,
    /// `[[private]]` tables (file only): path prefixes that only signed
    /// URLs or bearer tokens may read (see the `private` module).
    #[arg(skip)]
    pub private: Option<Vec<crate::private::PrivateConfig>>,
    /// Serve this origin through the caching tier instead of a directory:
    /// an HTTP server (http://host:port/ or https://host/) or an S3 bucket
    /// (s3://BUCKET[/PREFIX]); --cache is then the tier's memory budget.
    #[arg(long, value_name = "URL")]
    pub origin: Option<String>,
    /// Unit of origin fetches and storage (default 1MiB).
    #[arg(long, value_name = "SIZE")]
    pub origin_block: Option<ByteSize>,
    /// Origin blocks fetched ahead of the furthest reader (default 4).
    #[arg(long, value_name = "BLOCKS")]
    pub origin_readahead: Option<u32>,
    /// Time to wait for the origin's response head or next chunk (default 30s).
    #[arg(long, value_name = "TIME")]
    pub origin_timeout: Option<Span>,
    /// CA certificates (PEM) for an https origin, which must chain to them
    /// instead of the system's roots; for an S3 endpoint, trusted beside them.
    #[arg(long, value_name = "PEM")]
    pub origin_ca: Option<PathBuf>,
    /// S3-compatible endpoint (e.g. http://127.0.0.1:9000) instead of AWS;
    /// buckets are addressed path style. Credentials come from
    /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the config file.
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// S3 region (default: AWS_REGION, else us-east-1).
    #[arg(long)]
    pub s3_region: Option<String>,
    /// Allow plain HTTP to the S3 endpoint (default: when it is an http:// URL).
    #[arg(long, value_name = "BOOL")]
    pub s3_allow_http: Option<bool>,
    /// Credentials; a flag would show them to every user in ps, so these
    /// come from the config file or AWS_ACCESS_KEY_ID.
    #[arg(skip)]
    pub s3_access_key_id: Option<String>,
    /// See s3_access_key_id; or AWS_SECRET_ACCESS_KEY.
    #[arg(skip)]
    pub s3_secret_access_key: Option<String>,
    /// Freshness of S3 objects without a Cache-Control of their own
    /// (default: heuristic, a tenth of their age, at most a day).
    #[arg(long, value_name = "TIME")]
    pub s3_max_age: Option<Span>,
    /// Every member of this node's cluster (with --origin): base URLs
    /// (http://host:port), the same list on every node, this node's own
    /// among them (see --peer-self). Each group of an object's blocks has
    /// one owner, the only member that fetches it from the origin.
    #[arg(long, value_name = "URL,URL,...", value_delimiter = ',')]
    pub peers: Option<Vec<String>>,
    /// Every member of this node's cluster, from DNS instead of --peers:
    /// a member http://ADDR:PORT for each address NAME has (a headless
    /// service, a round-robin name), looked up again every --peer-resolve.
    #[arg(long, value_name = "NAME:PORT", conflicts_with = "peers")]
    pub peers_dns: Option<String>,
    /// Time between two lookups of --peers-dns (default 10s).
    #[arg(long, value_name = "TIME")]
    pub peer_resolve: Option<Span>,
    /// This node's URL in --peers (with --peers-dns: http://ADDR:PORT, the
    /// address the name gives for this node).
    #[arg(long, value_name = "URL")]
    pub peer_self: Option<String>,
    /// Bytes of an object per group, the unit members own: a multiple of
    /// --origin-block (default 4MiB).
    #[arg(long, value_name = "SIZE")]
    pub peer_group: Option<ByteSize>,
    /// Time between two health probes of each member (default 1s).
    #[arg(long, value_name = "TIME")]
    pub peer_probe: Option<Span>,
    /// Asks of one group its owner answers before the group is hot and
    /// the next members of its ranking serve it too (default 8; 0: never).
    #[arg(long, value_name = "N")]
    pub peer_hot_after: Option<u32>,
    /// A secret every member shares (env:NAME, file:PATH or the text):
    /// members prove their requests to each other with it, and a request
    /// marked as a member's without that proof is served as a client's.
    /// Needed for [[private]] prefixes in a cluster.
    #[arg(long, value_name = "SECRET")]
    pub peer_key: Option<String>,
}

impl Settings {
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Ok(toml::from_str(text)?)
    }

    /// Overlays these settings on `cfg`, then validates the result.
    pub fn apply(&self, cfg: &mut ServeConfig) -> Result<(), ConfigError> {
        fn set<T: Copy>(target: &mut T, value: Option<T>) {
            if let Some(v) = value {
                *target = v;
            }
        }
        if let Some(root) = &self.root {
            cfg.root = root.clone();
        }
        let s = &mut cfg.sched;
        set(&mut s.cache_bytes, self.cache.map(|b| b.0));
        set(&mut s.policy, self.policy);
        if let Some(b) = self.block {
            s.block_size = u32::try_from(b.0).map_err(|_| ConfigError::BlockTooLarge(b))?;
        }
        set(&mut s.active_len, self.active.map(|b| b.0));
        set(&mut s.queue_len, self.queue);
        set(&mut s.leapfront, self.leapfront);
        set(&mut s.threshold, self.threshold);
        set(&mut s.readahead, self.readahead);
        set(&mut s.favor, self.favor);
        if let Some(listen) = &self.listen {
            cfg.listen = listen.iter().flat_map(|l| l.addrs.iter().copied()).collect();
        }
        match &self.admin_listen {
            None => {}
            Some(Switch::Off) => cfg.admin_listen = None,
            Some(Switch::On(l)) => cfg.admin_listen = Some(l.addrs[0]),
        }
        match &self.redirect_listen {
            None => {}
            Some(Switch::Off) => cfg.redirect_listen = None,
            Some(Switch::On(l)) => cfg.redirect_listen = Some(l.addrs[0]),
        }
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => {}
            (Some(certs), Some(keys)) if certs.len() == keys.len() => {
                cfg.tls = certs
                    .iter()
                    .zip(keys)
                    .map(|(cert, key)| crate::tls::CertFiles { cert: cert.clone(), key: key.clone() })
                    .collect();
            }
            _ => return Err(ConfigError::Tls("give one --tls-key for each --tls-cert, in the same order")),
        }
        if let Some(domains) = &self.acme {
            cfg.acme.domains.clone_from(domains);
        }
        if let Some(url) = &self.acme_directory {
            cfg.acme.directory.clone_from(url);
        }
        if let Some(dir) = &self.acme_state {
            cfg.acme.state = Some(dir.clone());
        }
        if let Some(email) = &self.acme_email {
            cfg.acme.email = Some(email.clone());
        }
        if let Some(ca) = &self.acme_ca {
            cfg.acme.directory_ca = Some(ca.clone());
        }
        set(&mut cfg.max_connections, self.max_connections);
        set(&mut cfg.max_header_bytes, self.max_header.map(|b| b.0 as usize));
        set(&mut cfg.io_threads, self.io_threads);
        set(&mut cfg.header_timeout, self.header_timeout.map(|t| t.0));
        set(&mut cfg.drain_timeout, self.drain_timeout.map(|t| t.0));
        set(&mut cfg.zero_copy, self.zero_copy);
        set(&mut cfg.dotfiles, self.dotfiles);
        set(&mut cfg.listing, self.listing);
        if let Some(private) = &self.private {
            crate::private::PrivateRules::new(private)?;
            cfg.private.clone_from(private);
        }
        if let Some(target) = &self.access_log {
            cfg.access_log = target.clone();
        }
        set(&mut cfg.access_log_format, self.access_log_format);
        set(&mut cfg.send_timeout, self.send_timeout.map(|t| t.0));
        set(&mut cfg.index_wait, self.index_wait.map(|t| t.0));
        set(&mut cfg.max_connections_per_ip, self.max_connections_per_ip);
        set(&mut cfg.max_streams, self.max_streams.map(|n| n.max(1)));
        if let Some(dir) = &self.index_dir {
            cfg.index_dir = Some(dir.clone());
        }
        if let Some(dir) = &self.cache_dir {
            cfg.cache_dir = Some(dir.clone());
        }
        if let Some(r) = self.read_rate {
            cfg.read_rate = Some(r.0).filter(|&v| v > 0);
        }
        if let Some(b) = self.send_lowat {
            cfg.send_lowat = u32::try_from(b.0).ok().filter(|&v| v > 0);
        }
        if let Some(b) = self.send_lowat_uncached {
            cfg.send_lowat_uncached = u32::try_from(b.0).ok().filter(|&v| v > 0);
        }
        if let Some(url) = &self.origin {
            let source = parse_origin(url)?;
            match cfg.origin.as_mut() {
                // An origin named again (a flag over the file) keeps the
                // other origin settings already given.
                Some(o) => o.source = carry_s3_settings(source, &o.source),
                None => cfg.origin = Some(OriginConfig::new(source)),
            }
        }
        self.apply_s3(cfg)?;
        if let Some(o) = cfg.origin.as_mut() {
            if let Some(b) = self.origin_block {
                o.block_size = u32::try_from(b.0).ok().filter(|&v| v > 0).ok_or(ConfigError::BlockTooLarge(b))?;
            }
            set(&mut o.readahead, self.origin_readahead);
            set(&mut o.timeout, self.origin_timeout.map(|t| t.0));
            if let Some(ca) = &self.origin_ca {
                o.ca_file = Some(ca.clone());
            }
            self.apply_peers(o)?;
            let block = cfg.sched.block_size;
            if o.block_size % block != 0 {
                return Err(ConfigError::Origin(format!(
                    "--origin-block ({}) must be a multiple of --block ({block}): native downloads of origin objects are cut into blocks of --block",
                    o.block_size
                )));
            }
        }
        let peer_settings = [
            self.peers.is_some(),
            self.peers_dns.is_some(),
            self.peer_self.is_some(),
            self.peer_group.is_some(),
            self.peer_probe.is_some(),
            self.peer_resolve.is_some(),
            self.peer_hot_after.is_some(),
            self.peer_key.is_some(),
        ];
        if cfg.origin.is_none() && peer_settings.contains(&true) {
            return Err(ConfigError::Peers("a cluster shares an origin: give --origin too".into()));
        }
        cfg.sched.validate()?;
        crate::memory::MemoryPlan::new(cfg.sched.cache_bytes, cfg.sched.block_size, cfg.origin.as_ref())?;
        Ok(())
    }

    /// The cluster's settings onto the origin's: the member list, this
    /// node's place in it, the group size and the probe interval.
    fn apply_peers(&self, o: &mut OriginConfig) -> Result<(), ConfigError> {
        let me = || {
            let me = self
                .peer_self
                .as_deref()
                .ok_or_else(|| ConfigError::Peers("give --peer-self, this node's URL among the members".into()))?;
            parse_member(me)
        };
        if self.peers.is_some() && self.peers_dns.is_some() {
            return Err(ConfigError::Peers("give the members by --peers or by --peers-dns, not both".into()));
        }
        if let Some(list) = &self.peers {
            let members = list.iter().map(|u| parse_member(u)).collect::<Result<Vec<_>, _>>()?;
            let me = me()?;
            if !members.contains(&me) {
                return Err(ConfigError::Peers(format!("--peer-self {me} is not one of --peers")));
            }
            o.peers = Some(over_earlier(PeerConfig::new(members, me, None), o.peers.take()));
        }
        if let Some(name) = &self.peers_dns {
            let dns = parse_dns_members(name)?;
            let me = address_member(&me()?)?;
            // Looked up once now: a name that does not resolve is a
            // mistake to report at start, not a cluster of one.
            let members = dns
                .resolve_blocking()
                .map_err(|e| ConfigError::Peers(format!("--peers-dns {name}: cannot look it up: {e}")))?;
            if members.is_empty() {
                return Err(ConfigError::Peers(format!("--peers-dns {name}: the name has no address")));
            }
            let refresh: Option<(Arc<dyn MemberSource>, Duration)> = Some((Arc::new(dns), Duration::from_secs(10)));
            o.peers = Some(over_earlier(PeerConfig::new(members, me, refresh), o.peers.take()));
        }
        if let Some(every) = self.peer_resolve {
            // Onto a --peers-dns of this layer or of one below it.
            match o.peers.as_mut().and_then(|p| p.refresh.as_mut()) {
                Some((_, interval)) => *interval = every.0,
                None => return Err(ConfigError::Peers("--peer-resolve needs --peers-dns".into())),
            }
        }
        if let Some(p) = o.peers.as_mut() {
            if let Some(g) = self.peer_group {
                p.group_bytes = g.0;
            }
            if let Some(t) = self.peer_probe {
                p.probe_interval = t.0;
            }
            if let Some(n) = self.peer_hot_after {
                p.hot_after = n;
            }
            if let Some(secret) = &self.peer_key {
                p.key = Some(PeerKey::new(&crate::private::secret(secret)?));
            }
            if p.group_bytes == 0 || !p.group_bytes.is_multiple_of(u64::from(o.block_size)) {
                return Err(ConfigError::Peers(format!(
                    "--peer-group ({}) must be a multiple of --origin-block ({})",
                    p.group_bytes, o.block_size
                )));
            }
        } else if self.peer_self.is_some()
            || self.peer_group.is_some()
            || self.peer_probe.is_some()
            || self.peer_hot_after.is_some()
            || self.peer_key.is_some()
        {
            return Err(ConfigError::Peers(
                "--peer-self, --peer-group, --peer-probe, --peer-hot-after and --peer-key need --peers or --peers-dns"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// A member list given in this layer, with what an earlier layer (the
/// file, under the flags) set about the cluster besides: its group size,
/// probe interval, hot threshold and key.
fn over_earlier(new: PeerConfig, earlier: Option<PeerConfig>) -> PeerConfig {
    match earlier {
        Some(e) => PeerConfig {
            group_bytes: e.group_bytes,
            probe_interval: e.probe_interval,
            hot_after: e.hot_after,
            key: e.key,
            ..new
        },
        None => new,
    }
}

/// What no single layer can check: settings that must hold once the file
/// and the flags are both applied.
pub fn check_layers(cfg: &ServeConfig) -> Result<(), ConfigError> {
    if cfg.origin.as_ref().and_then(|o| o.peers.as_ref()).is_some_and(|p| p.key.is_none()) && !cfg.private.is_empty() {
        // Members ask each other without the client's signature or token:
        // only a proof of the cluster's key may stand for them.
        return Err(ConfigError::Peers("[[private]] prefixes in a cluster need --peer-key".into()));
    }
    Ok(())
}

/// `--peer-self` with `--peers-dns`: the members are named by address
/// (`http://ADDR:PORT`, as the name's addresses are written), so this
/// node's must be one, written the same way.
fn address_member(me: &http::Uri) -> Result<http::Uri, ConfigError> {
    let authority = me.authority().map(|a| a.as_str()).unwrap_or_default();
    let addr: std::net::SocketAddr = authority.parse().map_err(|_| {
        ConfigError::Peers(format!(
            "--peer-self {me}: with --peers-dns, give this node's address as the name has it (http://10.0.0.1:8080)"
        ))
    })?;
    format!("http://{addr}").parse().map_err(|e| ConfigError::Peers(format!("--peer-self {me}: {e}")))
}

/// `--peers-dns`: a host name and a port.
fn parse_dns_members(given: &str) -> Result<DnsMembers, ConfigError> {
    let bad = || ConfigError::Peers(format!("--peers-dns {given}: give NAME:PORT (members.example:8080)"));
    let (name, port) = given.trim().rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if name.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok(DnsMembers { name: name.trim_start_matches('[').trim_end_matches(']').to_owned(), port })
}

/// A member's base URL: http://host:port, nothing after the authority.
fn parse_member(url: &str) -> Result<http::Uri, ConfigError> {
    let uri: http::Uri = url.trim().parse().map_err(|e| ConfigError::Peers(format!("{url}: {e}")))?;
    let bare = uri.path_and_query().is_none_or(|p| p.as_str() == "/");
    if uri.scheme_str() != Some("http") || uri.authority().is_none() || !bare {
        return Err(ConfigError::Peers(format!("{url}: give a member as http://host:port")));
    }
    Ok(uri)
}

impl Settings {
    fn apply_s3(&self, cfg: &mut ServeConfig) -> Result<(), ConfigError> {
        fn set<T: Clone>(target: &mut Option<T>, value: &Option<T>) {
            if value.is_some() {
                target.clone_from(value);
            }
        }
        let Some(OriginSource::S3(s3)) = cfg.origin.as_mut().map(|o| &mut o.source) else {
            let given = [
                ("s3_endpoint", self.s3_endpoint.is_some()),
                ("s3_region", self.s3_region.is_some()),
                ("s3_allow_http", self.s3_allow_http.is_some()),
                ("s3_access_key_id", self.s3_access_key_id.is_some()),
                ("s3_secret_access_key", self.s3_secret_access_key.is_some()),
                ("s3_max_age", self.s3_max_age.is_some()),
            ];
            return match given.iter().find(|(_, set)| *set) {
                Some((name, _)) => Err(ConfigError::Origin(format!(
                    "setting {name} applies to an S3 origin only: give origin = \"s3://BUCKET\" (--origin s3://BUCKET)"
                ))),
                None => Ok(()),
            };
        };
        set(&mut s3.endpoint, &self.s3_endpoint);
        set(&mut s3.region, &self.s3_region);
        set(&mut s3.allow_http, &self.s3_allow_http);
        set(&mut s3.access_key_id, &self.s3_access_key_id);
        set(&mut s3.secret_access_key, &self.s3_secret_access_key);
        set(&mut s3.max_age, &self.s3_max_age.map(|t| t.0));
        if let Some(e) = &s3.endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(ConfigError::Origin(format!("S3 endpoint {e}: give an http:// or https:// URL")));
        }
        Ok(())
    }
}

/// `http://host:port/prefix` or `s3://BUCKET[/PREFIX]`.
fn parse_origin(url: &str) -> Result<OriginSource, ConfigError> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(ConfigError::Origin(format!("{url}: give a bucket, as in s3://BUCKET/PREFIX")));
        }
        let prefix = prefix.trim_matches('/').to_owned();
        return Ok(OriginSource::S3(S3Config { bucket: bucket.to_owned(), prefix, ..S3Config::default() }));
    }
    let uri: http::Uri = url.parse().map_err(|e| ConfigError::Origin(format!("{url}: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
        return Err(ConfigError::Origin(format!(
            "{url}: give an http:// or https://host[:port]/ URL, or s3://BUCKET[/PREFIX]"
        )));
    }
    Ok(OriginSource::Http(uri))
}

/// `new` with the S3 settings of `old` when both are S3 origins.
fn carry_s3_settings(new: OriginSource, old: &OriginSource) -> OriginSource {
    match (new, old) {
        (OriginSource::S3(new), OriginSource::S3(old)) => {
            OriginSource::S3(S3Config { bucket: new.bucket, prefix: new.prefix, ..old.clone() })
        }
        (new, _) => new,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Each flag's help says its default as "(default VALUE...": giving
    /// that value must change nothing, so the help cannot drift from
    /// [`ServeConfig::new`].
    #[test]
    fn the_defaults_in_the_help_are_the_real_ones() {
        use clap::{Args, FromArgMatches};
        let cmd = Settings::augment_args(clap::Command::new("serve"));
        // With an origin in a cluster of one, so that the origin's and the
        // cluster's settings count too.
        let base_argv = [
            "serve",
            "--origin",
            "http://origin.test/",
            "--peers-dns",
            "localhost:1",
            "--peer-self",
            "http://127.0.0.1:1",
        ];
        let origin = Settings::from_arg_matches(&cmd.clone().try_get_matches_from(base_argv).unwrap()).unwrap();
        let mut base = ServeConfig::new("/srv".into());
        origin.apply(&mut base).unwrap();
        let defaults = format!("{base:?}");
        let mut checked = 0;
        for arg in cmd.get_arguments().filter(|a| a.get_long().is_some()) {
            let long = arg.get_long().unwrap();
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(!help.is_empty(), "--{long} has no help line");
            let Some(rest) = help.split("(default ").nth(1) else { continue };
            let end = [")", ";", ",", ": "].iter().filter_map(|stop| rest.find(stop)).min().unwrap();
            let value = &rest[..end];
            let flag = format!("--{long}");
            let argv = base_argv.iter().copied().chain([flag.as_str(), value]);
            let matches = cmd.clone().try_get_matches_from(argv).unwrap();
            let mut cfg = ServeConfig::new("/srv".into());
            Settings::from_arg_matches(&matches).unwrap().apply(&mut cfg).unwrap();
            assert_eq!(format!("{cfg:?}"), defaults, "--{long} {value} is not the default");
            checked += 1;
        }
        assert!(checked >= 25, "only {checked} defaults found");
    }

    /// dist/circus.toml names every setting, and the values it sets are
    /// the defaults.
    #[test]
    fn the_shipped_config_file_has_every_setting_at_its_default() {
        use clap::Args;
        let text = include_str!("../../../dist/circus.toml");
        let cmd = Settings::augment_args(clap::Command::new("serve"));
        for arg in cmd.get_arguments() {
            let key = arg.get_id().as_str();
            let named = text.lines().any(|l| l.trim_start_matches("# ").starts_with(&format!("{key} = ")));
            assert!(named, "dist/circus.toml does not name {key}");
        }
        let file = Settings::parse(text).unwrap();
        let mut cfg = ServeConfig::new("/srv/circus".into());
        file.apply(&mut cfg).unwrap();
        assert_eq!(format!("{cfg:?}"), format!("{:?}", ServeConfig::new("/srv/circus".into())));
    }

    #[test]
    fn a_cluster_is_given_as_members_and_this_nodes_place_among_them() {
        let cluster = |argv: &[&str]| -> Result<ServeConfig, ConfigError> {
            use clap::{Args, FromArgMatches};
            let cmd = Settings::augment_args(clap::Command::new("serve"));
            let matches = cmd.try_get_matches_from(std::iter::once("serve").chain(argv.iter().copied())).unwrap();
            let mut cfg = ServeConfig::new("/srv".into());
            Settings::from_arg_matches(&matches).unwrap().apply(&mut cfg).map(|()| cfg)
        };
        let members = "http://10.0.0.1:8080,http://10.0.0.2:8080,http://10.0.0.3:8080";
        let cfg =
            cluster(&["--origin", "http://o/", "--peers", members, "--peer-self", "http://10.0.0.2:8080"]).unwrap();
        let peers = cfg.origin.unwrap().peers.unwrap();
        assert_eq!(
            (peers.members.len(), peers.me.to_string().as_str(), peers.group_bytes),
            (3, "http://10.0.0.2:8080/", 4 << 20)
        );
        assert_eq!(peers.probe_interval, Duration::from_secs(1));
        assert!(peers.refresh.is_none(), "a fixed list");
        // From DNS: every address of the name (here localhost's), looked
        // up again every --peer-resolve.
        let cfg = cluster(&[
            "--origin",
            "http://o/",
            "--peers-dns",
            "localhost:8080",
            "--peer-self",
            "http://127.0.0.1:8080",
            "--peer-resolve",
            "2s",
        ])
        .unwrap();
        let peers = cfg.origin.unwrap().peers.unwrap();
        assert!(peers.members.iter().any(|m| *m == "http://127.0.0.1:8080/"), "{:?}", peers.members);
        assert_eq!(peers.refresh.map(|(_, every)| every), Some(Duration::from_secs(2)));
        let refused = [
            (vec!["--origin", "http://o/", "--peers", members], "give --peer-self"),
            (vec!["--origin", "http://o/", "--peers", members, "--peer-self", "http://10.0.0.9:8080"], "not one of"),
            (
                vec!["--origin", "http://o/", "--peers", "10.0.0.1:8080", "--peer-self", "10.0.0.1:8080"],
                "http://host:port",
            ),
            (
                vec!["--origin", "http://o/", "--peers", "http://a:1/x", "--peer-self", "http://a:1/x"],
                "http://host:port",
            ),
            (
                vec![
                    "--origin",
                    "http://o/",
                    "--peers",
                    members,
                    "--peer-self",
                    "http://10.0.0.1:8080",
                    "--peer-group",
                    "1500KiB",
                ],
                "multiple of --origin-block",
            ),
            (vec!["--origin", "http://o/", "--peer-self", "http://10.0.0.1:8080"], "need --peers"),
            (vec!["--origin", "http://o/", "--peers-dns", "localhost"], "NAME:PORT"),
            (vec!["--origin", "http://o/", "--peers-dns", "localhost:80"], "give --peer-self"),
            (
                vec!["--origin", "http://o/", "--peers-dns", "localhost:80", "--peer-self", "http://localhost:80"],
                "give this node's address",
            ),
            (
                vec![
                    "--origin",
                    "http://o/",
                    "--peers-dns",
                    "no-such-host.invalid:80",
                    "--peer-self",
                    "http://[::1]:80",
                ],
                "cannot look it up",
            ),
            (
                vec![
                    "--origin",
                    "http://o/",
                    "--peers",
                    members,
                    "--peer-self",
                    "http://10.0.0.1:8080",
                    "--peer-resolve",
                    "5s",
                ],
                "needs --peers-dns",
            ),
            (vec!["/srv", "--peers", members, "--peer-self", "http://10.0.0.1:8080"], "give --origin"),
        ];
        for (argv, why) in refused {
            let e = cluster(&argv).unwrap_err().to_string();
            assert!(e.contains(why), "{argv:?}: {e}");
        }
        let file = Settings::parse(
            "origin = \"http://o/\"\npeers = [\"http://a:1\", \"http://b:1\"]\npeer_self = \"http://b:1\"\npeer_group = \"8MiB\"\npeer_probe = \"250ms\"\npeer_hot_after = 3\n",
        )
        .unwrap();
        let mut cfg = ServeConfig::new("/srv".into());
        file.apply(&mut cfg).unwrap();
        let peers = cfg.origin.unwrap().peers.unwrap();
        assert_eq!(
            (peers.me.to_string().as_str(), peers.group_bytes, peers.probe_interval, peers.hot_after),
            ("http://b:1/", 8 << 20, Duration::from_millis(250), 3)
        );
        // Members ask each other without the clients' signatures: only
        // with a key that proves them.
        use clap::{Args, FromArgMatches};
        let private = |key: &str, flags: &[&str]| {
            let mut cfg = ServeConfig::new("/srv".into());
            Settings::parse(&format!(
                "origin = \"http://o/\"\npeers = [\"http://a:1\"]\npeer_self = \"http://a:1\"\n{key}\
                 [[private]]\nprefix = \"/models/\"\ntokens = [\"a-token\"]\n"
            ))
            .unwrap()
            .apply(&mut cfg)?;
            let argv: Vec<&str> = ["serve"].into_iter().chain(flags.iter().copied()).collect();
            let matches = Settings::augment_args(clap::Command::new("serve")).try_get_matches_from(argv).unwrap();
            Settings::from_arg_matches(&matches).unwrap().apply(&mut cfg)?;
            check_layers(&cfg).map(|()| cfg)
        };
        let e = private("", &[]).unwrap_err().to_string();
        assert!(e.contains("[[private]]") && e.contains("--peer-key"), "{e}");
        private("peer_key = \"members-only\"\n", &[]).unwrap();
        // The key as a flag over a file that has the rest; and a member
        // list as flags keeps the file's key.
        private("", &["--peer-key", "members-only"]).unwrap();
        let cfg = private(
            "peer_key = \"members-only\"\npeer_hot_after = 3\n",
            &["--peers", "http://b:1,http://c:1", "--peer-self", "http://b:1"],
        )
        .unwrap();
        let peers = cfg.origin.unwrap().peers.unwrap();
        assert!(peers.key.is_some() && peers.hot_after == 3 && peers.members.len() == 2, "{peers:?}");
        let e = private("peer_key = \"env:CIRCUS_TEST_UNSET_KEY\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("CIRCUS_TEST_UNSET_KEY"), "{e}");
    }

    #[test]
    fn toml_overlays_and_rejects_unknown_keys() {
        let mut cfg = ServeConfig::new("/srv".into());
        Settings::parse("cache = \"1GiB\"\npolicy = \"sequential\"\nqueue = 8\n").unwrap().apply(&mut cfg).unwrap();
        assert_eq!(
            (cfg.sched.cache_bytes, cfg.sched.policy, cfg.sched.queue_len),
            (1 << 30, PolicyKind::Sequential, 8)
        );
        assert!(Settings::parse("cahce = \"1GiB\"").unwrap_err().to_string().contains("unknown field"));
        let bad = Settings::parse("block = \"huge\"").unwrap_err();
        assert!(bad.to_string().contains("huge"), "{bad}");
        let mut o = ServeConfig::new("/srv".into());
        Settings::parse(
            "origin = \"http://127.0.0.1:9000/files\"\norigin_block = \"256KiB\"\norigin_timeout = \"5s\"\n",
        )
        .unwrap()
        .apply(&mut o)
        .unwrap();
        let origin = o.origin.unwrap();
        assert_eq!((origin.source.to_string().as_str(), origin.block_size), ("http://127.0.0.1:9000/files", 256 << 10));
        assert_eq!(origin.timeout, Duration::from_secs(5));
        let tiny = Settings::parse("origin = \"http://x/\"\ncache = \"4MiB\"")
            .unwrap()
            .apply(&mut ServeConfig::new("/".into()));
        assert!(tiny.unwrap_err().to_string().contains("give --cache 13981016 or more"));
        let https = Settings::parse("origin = \"https://x/\"\norigin_ca = \"/ca.pem\"").unwrap();
        let mut with_https = ServeConfig::new("/".into());
        https.apply(&mut with_https).unwrap();
        assert_eq!(with_https.origin.unwrap().ca_file.as_deref(), Some(std::path::Path::new("/ca.pem")));
        let ftp = Settings::parse("origin = \"ftp://x/\"").unwrap().apply(&mut ServeConfig::new("/".into()));
        assert!(ftp.unwrap_err().to_string().contains("https://host[:port]/"));
        let stray = Settings::parse("s3_region = \"eu-west-1\"").unwrap().apply(&mut ServeConfig::new("/".into()));
        assert!(stray.unwrap_err().to_string().contains("applies to an S3 origin only"));
        let bytes = Settings::parse("cache = 1048576").unwrap();
        assert_eq!(bytes.cache, Some(ByteSize(1 << 20)));
    }

    #[test]
    fn s3_origin_from_file_then_flags() {
        let mut cfg = ServeConfig::new("/".into());
        let file = "origin = \"s3://media/v1/\"\ns3_endpoint = \"http://127.0.0.1:9000\"\ns3_region = \"eu-west-1\"\n\
                    s3_access_key_id = \"AK\"\ns3_secret_access_key = \"SK\"\norigin_block = \"256KiB\"\n";
        Settings::parse(file).unwrap().apply(&mut cfg).unwrap();
        // A flag naming another bucket keeps the file's endpoint and keys.
        let flags = Settings {
            origin: Some("s3://other".into()),
            s3_max_age: Some(Span(Duration::from_secs(60))),
            ..Settings::default()
        };
        flags.apply(&mut cfg).unwrap();
        let o = cfg.origin.unwrap();
        let OriginSource::S3(s3) = &o.source else { panic!("{:?}", o.source) };
        assert_eq!((s3.bucket.as_str(), s3.prefix.as_str()), ("other", ""));
        assert_eq!((s3.endpoint.as_deref(), s3.region.as_deref()), (Some("http://127.0.0.1:9000"), Some("eu-west-1")));
        assert_eq!((s3.access_key_id.as_deref(), s3.max_age), (Some("AK"), Some(Duration::from_secs(60))));
        assert_eq!(o.block_size, 256 << 10);
        assert!(!format!("{s3:?}").contains("SK"), "the secret stays out of Debug");
        let prefixed = parse_origin("s3://media/v1/").unwrap();
        assert_eq!(prefixed.to_string(), "s3://media/v1");
        assert!(parse_origin("s3:///x").unwrap_err().to_string().contains("give a bucket"));
        let bad = Settings::parse("origin = \"s3://b\"\ns3_endpoint = \"127.0.0.1:9000\"").unwrap();
        assert!(bad.apply(&mut ServeConfig::new("/".into())).unwrap_err().to_string().contains("http:// or https://"));
    }
}
