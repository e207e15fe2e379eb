//! What every request handler shares, and the served directory's answers
//! for the hit lane.

use crate::{driver::DriverHandle, files::FileTable, memory::MemoryPlan, metrics, small};
use circus_http::HitSource;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct AppState {
    pub files: FileTable,
    pub driver: DriverHandle,
    pub metrics: Arc<metrics::Metrics>,
    pub registry: Registry,
    /// Set with `--origin`: requests go to the caching tier, not the directory.
    pub origin: Option<Arc<circus_origin::OriginTier>>,
    /// Whole small local files for the hit lane (no budget with an origin).
    pub small: Arc<small::SmallFiles>,
    /// How `--cache` is divided.
    pub memory: MemoryPlan,
    /// What the block cache's memory is made of.
    pub cache_pages: crate::memory::CachePages,
    /// Prefixes only signed URLs or bearer tokens may read.
    pub private: crate::private::PrivateRules,
    /// TCP_NOTSENT_LOWAT per response.
    pub send_marks: crate::send_mark::SendMarks,
}

/// The local directory's answers for the hit lane.
impl HitSource for AppState {
    fn render(
        &self,
        target: &str,
        method_head: bool,
        headers: &[httparse::Header<'_>],
        head: &mut Vec<u8>,
    ) -> Option<bytes::Bytes> {
        self.small.render(&self.files, target, method_head, headers, head)
    }
}
