//! Prometheus metrics, registered in a registry the caller owns (no globals).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    pub code: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleLabel {
    pub role: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    pub path: &'static str,
}

#[derive(Debug)]
pub struct Metrics {
    pub sent_bytes: Counter,
    pub storage_read_bytes: Counter,
    pub storage_errors: Counter,
    pub evictions: Counter,
    pub resident_bytes: Gauge,
    /// Bytes of blocks held by connections that stopped reading, counted
    /// sent by the scheduler and so outside its budget (capped at it).
    pub detached_bytes: Gauge,
    requests: Family<StatusLabel, Counter>,
    /// The `requests` counter of status 200, looked up once: most
    /// responses are 200s, and a label lookup takes the family's lock.
    requests_ok: Counter,
    pub connections: Gauge,
    pub downloads_abandoned: Counter,
    pub downloads_parked: Counter,
    pub connections_cut: Counter,
    pub connections_evicted: Counter,
    pub download_seconds: Histogram,
    /// Refreshed from the scheduler at each scrape.
    pub cache_hits: Counter,
    pub cache_misses: Counter,
    pub active_clients: Family<RoleLabel, Gauge>,
    pub active_files: Gauge,
    /// Refreshed at each scrape.
    pub small_files_bytes: Gauge,
    /// With HTTPS: 1 for the way records are encrypted (`ktls` or `userspace`).
    pub tls_send_path: Family<PathLabel, Gauge>,
    /// HTTPS connections past their handshake, by the way their records
    /// were encrypted (`ktls`, `userspace`, or `ktls_refused`: lost).
    pub tls_connections: Family<PathLabel, Counter>,
    /// With HTTPS: whether the kernel offered kTLS at start (1) or not (0).
    pub ktls_available: Gauge,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let requests = Family::<StatusLabel, Counter>::default();
        let requests_ok = requests.get_or_create(&StatusLabel { code: 200 }).clone();
        let m = Metrics {
            sent_bytes: Counter::default(),
            storage_read_bytes: Counter::default(),
            storage_errors: Counter::default(),
            evictions: Counter::default(),
            resident_bytes: Gauge::default(),
            detached_bytes: Gauge::default(),
            requests,
            requests_ok,
            connections: Gauge::default(),
            downloads_abandoned: Counter::default(),
            downloads_parked: Counter::default(),
            connections_cut: Counter::default(),
            connections_evicted: Counter::default(),
            download_seconds: Histogram::new([0.01, 0.1, 1.0, 10.0, 60.0, 300.0, 1800.0, 7200.0]),
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            active_clients: Family::default(),
            active_files: Gauge::default(),
            small_files_bytes: Gauge::default(),
            tls_send_path: Family::default(),
            tls_connections: Family::default(),
            ktls_available: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("circus");
        r.register("sent_bytes", "Block bytes handed to client sockets", m.sent_bytes.clone());
        r.register("storage_read_bytes", "Bytes read from storage", m.storage_read_bytes.clone());
        r.register("storage_errors", "Storage reads that failed", m.storage_errors.clone());
        r.register("cache_evictions", "Blocks evicted from the block cache", m.evictions.clone());
        r.register("cache_resident_bytes", "Bytes resident or being read", m.resident_bytes.clone());
        r.register(
            "cache_detached_bytes",
            "Bytes held by connections that stopped reading, outside the cache budget",
            m.detached_bytes.clone(),
        );
        r.register("cache_hits", "Block picks served from memory", m.cache_hits.clone());
        r.register("cache_misses", "Block picks that needed a storage read", m.cache_misses.clone());
        r.register("requests", "HTTP responses by status", m.requests.clone());
        r.register("connections", "Open client connections", m.connections.clone());
        r.register("downloads_abandoned", "Downloads whose client left early", m.downloads_abandoned.clone());
        r.register(
            "downloads_parked",
            "Times a download's queued blocks were taken back because its client stopped reading",
            m.downloads_parked.clone(),
        );
        r.register(
            "connections_cut",
            "Connections closed because they stopped reading while holding blocks the cache needed back",
            m.connections_cut.clone(),
        );
        r.register(
            "connections_evicted",
            "Idle connections closed to make room for new ones near --max-connections",
            m.connections_evicted.clone(),
        );
        r.register("download_duration_seconds", "Completed download durations", m.download_seconds.clone());
        r.register("active_clients", "Downloads in progress by role", m.active_clients.clone());
        r.register("active_files", "Files with downloads in progress", m.active_files.clone());
        r.register(
            "small_files_resident_bytes",
            "Bytes of whole small files kept for the hit lane",
            m.small_files_bytes.clone(),
        );
        r.register(
            "tls_send_path",
            "HTTPS record encryption in use: ktls (the kernel) or userspace (rustls)",
            m.tls_send_path.clone(),
        );
        r.register(
            "tls_connections",
            "HTTPS connections past their handshake by record encryption: ktls, userspace, or ktls_refused (the kernel refused the keys; the connection was lost)",
            m.tls_connections.clone(),
        );
        r.register("ktls_available", "Whether the kernel's tls module was found at start", m.ktls_available.clone());
        m
    }

    /// Counts one response of status `code`.
    pub fn count_response(&self, code: u16) {
        self.response_counter(code).inc();
    }

    /// The counter of responses of status `code`, to count many without a
    /// lookup each.
    pub fn response_counter(&self, code: u16) -> Counter {
        match code {
            200 => self.requests_ok.clone(),
            _ => self.requests.get_or_create(&StatusLabel { code }).clone(),
        }
    }
}
